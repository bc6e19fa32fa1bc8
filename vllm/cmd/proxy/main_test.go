package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

// TestRun starts the command on a free port, checks /health, and stops it
// by cancelling its context; a bad command line exits 2.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	var code int
	var wg sync.WaitGroup
	var logs bytes.Buffer
	wg.Add(1)
	go func() {
		defer wg.Done()
		code = run(ctx, []string{"--prefill", "http://127.0.0.1:1", "8999", "--decode=http://127.0.0.1:2", "--port", "0"}, &logs, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case <-time.After(20 * time.Second):
		t.Fatal("proxy did not start")
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + addr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	hc.CloseIdleConnections()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"prefill_instances":1`) {
		t.Fatalf("health: %d %s", resp.StatusCode, body)
	}
	cancel()
	wg.Wait()
	if code != 0 {
		t.Fatalf("exit %d; logs: %s", code, logs.String())
	}
	var out bytes.Buffer
	if c := run(context.Background(), []string{"--decode", "http://x:1"}, &out, nil); c != 2 || !strings.Contains(out.String(), "--prefill") {
		t.Fatalf("bad command line: exit %d, %q", c, out.String())
	}
}

// TestMain checks that no goroutine outlives the tests.
func TestMain(m *testing.M) { leakcheck.Main(m) }
