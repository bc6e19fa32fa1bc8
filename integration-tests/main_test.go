package integration

import (
	"testing"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

// TestMain fails the run if goroutines started by the tests (gRPC
// transports, HTTP keep-alive loops, TCP handlers) are still alive after
// leakcheck.Deadline.
func TestMain(m *testing.M) { leakcheck.Main(m) }
