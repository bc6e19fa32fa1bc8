package shm_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package when its tests leave transport goroutines
// behind. Goroutines finish asynchronously after Close returns, so the
// check polls for a bounded time (the only wait in this package).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitNoLeaks(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutine leak:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func waitNoLeaks(limit time.Duration) string {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		leaked := leakedGoroutines()
		if leaked == "" || time.Now().After(deadline) {
			return leaked
		}
		<-tick.C
	}
}

func leakedGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "mooncake/core/transfer/shm.") && !strings.Contains(g, "shm_test.waitNoLeaks") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
