package proxy

import (
	"testing"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

// TestMain checks that no goroutine (server, client connection) outlives
// the tests.
func TestMain(m *testing.M) { leakcheck.Main(m) }
