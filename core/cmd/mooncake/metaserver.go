package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
)

// metadataServerCmd is `mooncake metadata-server`: a standalone HTTP
// metadata server (upstream's mooncake_http_metadata_server), the same
// protocol and handler `mooncake master` embeds, keeping keys in memory
// until it stops.
func metadataServerCmd() *cobra.Command {
	var (
		host string
		port int
		tf   tlsFlags
	)
	c := &cobra.Command{
		Use:   "metadata-server",
		Short: "Run a standalone HTTP metadata server for transfer engines (GET/PUT/DELETE /metadata?key=K)",
		Long: `Run a standalone transfer-engine HTTP metadata server, as upstream's
mooncake_http_metadata_server (flags --host, --port, defaults 0.0.0.0:8080).
Keys live in memory and are lost when it stops. mooncake master serves the
same protocol itself unless --enable_http_metadata_server=false. With
--tls-ca, --tls-cert and --tls-key it serves https:// and requires client
certificates issued by the CA bundle (ours; upstream has no TLS).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if port < 0 || port > 65535 {
				return &exitError{2, fmt.Sprintf("mooncake metadata-server: --port %d is not in 0..65535", port)}
			}
			poolTLS, _, err := tf.load("metadata-server")
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				return &exitError{1, "mooncake metadata-server: " + err.Error()}
			}
			mux := http.NewServeMux()
			mux.Handle("/metadata", httpmeta.NewHandler(memmeta.New()))
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			served := make(chan error, 1)
			if poolTLS != nil {
				srv.TLSConfig = poolTLS.Server()
				srv.ErrorLog = log.New(os.Stderr, "mooncake metadata-server: ", 0)
				go func() { served <- srv.ServeTLS(ln, "", "") }()
				fmt.Fprintf(os.Stderr, "mooncake metadata-server: serving https://%s/metadata; %s\n", ln.Addr(), poolTLS)
			} else {
				go func() { served <- srv.Serve(ln) }()
				fmt.Fprintf(os.Stderr, "mooncake metadata-server: serving http://%s/metadata\n", ln.Addr())
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			select {
			case err := <-served:
				return &exitError{1, "mooncake metadata-server: " + err.Error()}
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				srv.Close()
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&host, "host", "0.0.0.0", "bind address")
	f.IntVar(&port, "port", 8080, "port (0 = any free port, printed on stderr)")
	tf.register(f, "serves https:// and requires client certificates", false, false)
	return c
}
