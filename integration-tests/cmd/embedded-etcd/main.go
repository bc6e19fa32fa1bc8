// Command embedded-etcd runs a single-member etcd server (etcdtest.Serve:
// 127.0.0.1, free ports, data in a temporary folder removed on exit) for
// tests outside `go test` that need a real etcd, such as the Python tests
// of mooncake.engine's etcd metadata mode. It prints
// "endpoint 127.0.0.1:<port>" on stdout once the server is ready and runs
// until SIGINT, SIGTERM or its standard input closes (so it never outlives
// the test that started it).
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
)

func main() {
	dir, err := os.MkdirTemp("", "embedded-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded-etcd:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	ep, stop, err := etcdtest.Serve(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded-etcd:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	defer stop()
	fmt.Printf("endpoint %s\n", ep)
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-sig:
	case <-done:
	}
}
