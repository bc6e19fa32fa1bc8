package engine

import (
	"testing"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

// TestMain fails the package when its tests leave goroutines behind
// (engines, transports, HTTP clients not shut down): the count is polled
// back to the baseline for up to 10 s, then the survivors are printed.
func TestMain(m *testing.M) { leakcheck.Main(m) }
