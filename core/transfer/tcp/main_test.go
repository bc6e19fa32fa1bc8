package tcp

import (
	"testing"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

// TestMain fails the package when a test leaves goroutines behind (a
// connection's reader or writer that outlived its peer).
func TestMain(m *testing.M) { leakcheck.Main(m) }
