// Package leakcheck fails a test binary that leaves goroutines behind: use
// it from TestMain. It polls with a deadline (goroutines of closed servers
// take a moment to exit) instead of sleeping.
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Deadline is how long Main waits for goroutines to wind down.
const Deadline = 10 * time.Second

// Main runs the tests and, if they passed, exits non-zero when more
// goroutines are alive after them than before (after Deadline), printing
// the extra stacks. Call it as `func TestMain(m *testing.M) { leakcheck.Main(m) }`.
func Main(m *testing.M) {
	base := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		if err := Wait(base, Deadline); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// Wait polls runtime.NumGoroutine until it is at most base or d passed;
// then it returns an error carrying every other goroutine's stack.
func Wait(base int, d time.Duration) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return nil
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			var out []string
			for _, g := range bytes.Split(buf, []byte("\n\n")) {
				if !bytes.Contains(g, []byte("leakcheck.Wait")) {
					out = append(out, string(g))
				}
			}
			return fmt.Errorf("goroutine leak: %d goroutines after the tests, %d before:\n%s", n, base, strings.Join(out, "\n\n"))
		}
		<-tick.C
	}
}
