// Command proxy is a small OpenAI-compatible prefill/decode proxy for vLLM
// instances in P/D disaggregation (sequential mode of vLLM's toy proxy and
// mooncake_connector_proxy.py); see package vllm/proxy for the exact
// requests it sends.
//
//	proxy --prefill http://127.0.0.1:8100 8998 --decode http://127.0.0.1:8200 --port 8000
//
// It listens on --host (default 127.0.0.1) and --port (default 8000), logs
// to stderr, and stops gracefully (in-flight requests get 10 s) on SIGINT or
// SIGTERM. Exit status: 0 after a signal, 2 for a bad command line, 1 when
// it cannot listen.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/mooncake-go/mooncake/vllm/proxy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stderr, nil))
}

// run serves until ctx ends; ready, if set, gets the bound address.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(addr string)) int {
	a, err := proxy.ParseArgs(args)
	if errors.Is(err, proxy.ErrHelp) {
		fmt.Fprint(os.Stdout, proxy.Usage) // asked for: stdout, so it pipes into a pager
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%v\n%s", err, proxy.Usage)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	p, err := proxy.New(proxy.Config{Prefill: a.Prefill, Decode: a.Decode, Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 2
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(a.Host, strconv.Itoa(a.Port)))
	if err != nil {
		fmt.Fprintf(stderr, "proxy: listen: %v\n", err)
		return 1
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	log.Info("proxy listening", "addr", ln.Addr().String(), "prefill", len(a.Prefill), "decode", len(a.Decode))
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case <-ctx.Done():
	case err := <-done:
		fmt.Fprintf(stderr, "proxy: serve: %v\n", err)
		return 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-done
	p.CloseIdleConnections()
	return 0
}
