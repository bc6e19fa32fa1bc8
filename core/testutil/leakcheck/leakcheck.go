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
	base, _ := goroutines()
	code := m.Run()
	if code == 0 {
		if err := Wait(base, Deadline); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// ignored are goroutines the test binary itself may leave running: the
// signal loop that fuzzing (go test -fuzz) starts with signal.Notify.
var ignored = []string{"os/signal.signal_recv", "os/signal.loop"}

// goroutines returns how many goroutines are alive, not counting the
// ignored ones and the caller, and their stacks.
func goroutines() (int, []string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
next:
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("leakcheck.goroutines")) {
			continue
		}
		for _, s := range ignored {
			if bytes.Contains(g, []byte(s)) {
				continue next
			}
		}
		out = append(out, string(g))
	}
	return len(out), out
}

// Wait polls the goroutines until at most base are alive (besides the
// caller and the ones the test binary itself starts) or d passed; then it
// returns an error carrying every other goroutine's stack.
func Wait(base int, d time.Duration) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		n, stacks := goroutines()
		if n <= base {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("goroutine leak: %d goroutines after the tests, %d before:\n%s", n, base, strings.Join(stacks, "\n\n"))
		}
		<-tick.C
	}
}
