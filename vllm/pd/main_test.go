package pd

import (
	"os"
	"testing"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

// TestMain runs the producer helper process when asked to (see
// TestTwoProcesses), otherwise the tests with a goroutine leak check.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(producerHelper())
	}
	leakcheck.Main(m)
}
