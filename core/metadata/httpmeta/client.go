package httpmeta

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// Client defaults, as upstream's HTTPStoragePlugin (CURLOPT_TIMEOUT_MS 3000,
// CURLOPT_CONNECTTIMEOUT_MS 1500).
const (
	DefaultRequestTimeout = 3000 * time.Millisecond
	DefaultConnectTimeout = 1500 * time.Millisecond
)

// maxErrorBody is how much of a non-200 response body a StatusError keeps.
const maxErrorBody = 512

// ClientOption configures NewClient.
type ClientOption func(*clientConfig)

type clientConfig struct {
	requestTimeout time.Duration
	connectTimeout time.Duration
	httpClient     *http.Client
	httpClientSet  bool
	token          string
	maxResponse    int64
	tls            *tls.Config
}

// WithRequestTimeout bounds each request, connect to last body byte
// (default DefaultRequestTimeout). NewClient rejects d <= 0. Ignored with
// WithHTTPClient.
func WithRequestTimeout(d time.Duration) ClientOption {
	return func(c *clientConfig) { c.requestTimeout = d }
}

// WithConnectTimeout bounds TCP connect and TLS handshake (default
// DefaultConnectTimeout). NewClient rejects d <= 0. Ignored with
// WithHTTPClient.
func WithConnectTimeout(d time.Duration) ClientOption {
	return func(c *clientConfig) { c.connectTimeout = d }
}

// WithHTTPClient makes the Client send its requests through hc, whose own
// timeouts, transport, proxy and redirect policy then apply instead of the
// defaults; Close does not touch it. NewClient rejects a nil hc.
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *clientConfig) { c.httpClient, c.httpClientSet = hc, true }
}

// WithTLSConfig makes the Client's transport use tc for https:// URLs:
// with a tlsconfig.Config's Client(), mutual TLS to a master whose
// metadata server requires it. NewClient rejects it with a plaintext
// http:// base URL, which would silently not use it. Ignored with
// WithHTTPClient. Ours: upstream's client has no TLS settings of its own.
func WithTLSConfig(tc *tls.Config) ClientOption {
	return func(c *clientConfig) { c.tls = tc }
}

// WithBearerToken sends "Authorization: Bearer <token>" with every request,
// as upstream does when MC_METADATA_HTTP_TOKEN is set (this package reads no
// environment; the caller passes the token). An empty token sends nothing.
func WithBearerToken(token string) ClientOption {
	return func(c *clientConfig) { c.token = token }
}

// WithMaxResponseBytes caps the size of a value Get accepts (default
// DefaultMaxValueBytes); a larger response fails Get with an error. NewClient
// rejects n <= 0.
func WithMaxResponseBytes(n int64) ClientOption {
	return func(c *clientConfig) { c.maxResponse = n }
}

// Client is a metadata.Store backed by a server of upstream's HTTP metadata
// protocol, as upstream's HTTPStoragePlugin. It is safe for concurrent use.
// It never retries: a failed call returns its error and the caller decides.
type Client struct {
	base        *url.URL // parsed base URL; never mutated after NewClient
	hc          *http.Client
	tls         *tls.Config     // WithTLSConfig's; nil = none
	transport   *http.Transport // non-nil only when the Client built hc
	token       string
	maxResponse int64
}

var _ metadata.Store = (*Client)(nil)

// NewClient returns a Client for the metadata server at baseURL (the whole
// connection string, e.g. "http://10.0.0.1:8080/metadata"; an existing query
// string is kept and key= is appended to it).
//
// By default requests use a dedicated transport with upstream's timeouts
// (DefaultRequestTimeout, DefaultConnectTimeout), no proxy (environment
// proxy variables are not consulted), and no redirect following (libcurl's
// default), so a 3xx answer is an error. Options override these.
//
// It returns an error wrapping metadata.ErrInvalidConnString if baseURL is
// not an absolute http or https URL with a host and no fragment, and an error
// naming the option for an invalid option value. It does no I/O.
func NewClient(baseURL string, opts ...ClientOption) (*Client, error) {
	cfg := clientConfig{
		requestTimeout: DefaultRequestTimeout,
		connectTimeout: DefaultConnectTimeout,
		maxResponse:    DefaultMaxValueBytes,
	}
	for _, o := range opts {
		o(&cfg)
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("httpmeta: base URL %q: %w: %v", baseURL, metadata.ErrInvalidConnString, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("httpmeta: base URL %q: %w: scheme must be http or https", baseURL, metadata.ErrInvalidConnString)
	case u.Host == "":
		return nil, fmt.Errorf("httpmeta: base URL %q: %w: no host", baseURL, metadata.ErrInvalidConnString)
	case u.Fragment != "" || strings.Contains(baseURL, "#"):
		return nil, fmt.Errorf("httpmeta: base URL %q: %w: fragment not allowed", baseURL, metadata.ErrInvalidConnString)
	}
	if cfg.maxResponse <= 0 {
		return nil, fmt.Errorf("httpmeta: max response bytes %d must be positive", cfg.maxResponse)
	}
	if cfg.tls != nil && u.Scheme != "https" {
		return nil, fmt.Errorf("httpmeta: base URL %q: %w: plaintext http:// with a TLS configuration; use https://", baseURL, metadata.ErrInvalidConnString)
	}
	u.ForceQuery = false
	c := &Client{base: u, token: cfg.token, maxResponse: cfg.maxResponse}
	if cfg.httpClientSet {
		if cfg.httpClient == nil {
			return nil, errors.New("httpmeta: WithHTTPClient(nil)")
		}
		c.hc = cfg.httpClient
		return c, nil
	}
	if cfg.requestTimeout <= 0 {
		return nil, fmt.Errorf("httpmeta: request timeout %v must be positive", cfg.requestTimeout)
	}
	if cfg.connectTimeout <= 0 {
		return nil, fmt.Errorf("httpmeta: connect timeout %v must be positive", cfg.connectTimeout)
	}
	c.tls = cfg.tls
	dialer := &net.Dialer{Timeout: cfg.connectTimeout, KeepAlive: 30 * time.Second}
	c.transport = &http.Transport{
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.connectTimeout,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       cfg.tls,
	}
	c.hc = &http.Client{
		Transport: c.transport,
		Timeout:   cfg.requestTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return c, nil
}

// Get fetches the value under key (GET <base>?key=K). It returns an error
// wrapping metadata.ErrNotFound, naming key and URL, on 404 (as upstream's
// getWithStatus maps 404 to kNotFound; note that a server mounted at another
// path also answers 404); metadata.ErrInvalidKey for an empty key; a
// *StatusError for any other non-200 status; an error if the value exceeds
// the response cap; and transport or ctx errors wrapped with key and URL.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	resp, u, err := c.do(ctx, http.MethodGet, key, nil)
	if err != nil {
		return nil, err
	}
	defer drainClose(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, fmt.Errorf("httpmeta: get key %q at %s: %w", key, u, metadata.ErrNotFound)
	default:
		return nil, newStatusError(http.MethodGet, key, u, resp)
	}
	if resp.ContentLength > c.maxResponse {
		return nil, fmt.Errorf("httpmeta: get key %q at %s: value of %d bytes exceeds limit of %d bytes", key, u, resp.ContentLength, c.maxResponse)
	}
	v, err := readAllSized(io.LimitReader(resp.Body, c.maxResponse+1), resp.ContentLength)
	if err != nil {
		return nil, fmt.Errorf("httpmeta: get key %q at %s: reading value: %w", key, u, err)
	}
	if int64(len(v)) > c.maxResponse {
		return nil, fmt.Errorf("httpmeta: get key %q at %s: value exceeds limit of %d bytes", key, u, c.maxResponse)
	}
	return v, nil
}

// Put stores value under key (PUT <base>?key=K, Content-Type
// application/json, as upstream). It returns metadata.ErrInvalidKey for an
// empty key, a *StatusError for any non-200 status (413 when the server's
// size cap is exceeded), and transport or ctx errors wrapped with key and
// URL. It does not retain value and never retries.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	resp, u, err := c.do(ctx, http.MethodPut, key, value)
	if err != nil {
		return err
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return newStatusError(http.MethodPut, key, u, resp)
	}
	return nil
}

// Delete removes key (DELETE <base>?key=K). It returns an error wrapping
// metadata.ErrNotFound on 404 (mooncake_master and NewHandler; the upstream
// example server answers 200 for unknown keys, so Delete returns nil there);
// metadata.ErrInvalidKey for an empty key; a *StatusError for any other
// non-200 status; and transport or ctx errors wrapped with key and URL.
func (c *Client) Delete(ctx context.Context, key string) error {
	resp, u, err := c.do(ctx, http.MethodDelete, key, nil)
	if err != nil {
		return err
	}
	defer drainClose(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusNotFound:
		return fmt.Errorf("httpmeta: delete key %q at %s: %w", key, u, metadata.ErrNotFound)
	default:
		return newStatusError(http.MethodDelete, key, u, resp)
	}
}

// Close releases the idle connections of the transport NewClient built; it
// leaves a WithHTTPClient client alone. The Client stays usable (it dials
// again). It always returns nil.
func (c *Client) Close() error {
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
	return nil
}

// KeyURL returns the request URL for key: the base URL with key=<escaped>
// appended to its query string. Keys are escaped as libcurl's
// curl_easy_escape does (every byte but A-Z a-z 0-9 - . _ ~ becomes %XX).
func (c *Client) KeyURL(key string) string {
	u := *c.base
	q := "key=" + escapeKey(key)
	if u.RawQuery != "" {
		u.RawQuery += "&" + q
	} else {
		u.RawQuery = q
	}
	return u.String()
}

// escapeKey percent-encodes every byte outside RFC 3986's unreserved set.
// url.QueryEscape does exactly that except that it writes ' ' as '+'; a
// literal '+' has already become %2B, so swapping '+' for %20 is exact.
func escapeKey(key string) string {
	return strings.ReplaceAll(url.QueryEscape(key), "+", "%20")
}

// do sends one request and returns the response (status unchecked) and the
// URL it used. Errors are wrapped with method, key and URL.
func (c *Client) do(ctx context.Context, method, key string, body []byte) (*http.Response, string, error) {
	op := strings.ToLower(method)
	if key == "" {
		return nil, "", fmt.Errorf("httpmeta: %s: empty key: %w", op, metadata.ErrInvalidKey)
	}
	u := c.KeyURL(key)
	var rd io.Reader
	if method == http.MethodPut {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, u, fmt.Errorf("httpmeta: %s key %q at %s: %w", op, key, u, err)
	}
	if method == http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// *url.Error repeats method and URL; keep only its cause.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		if c.tls != nil && ctx.Err() == nil {
			// net/http's TLS errors can be as bare as "http2: client conn
			// could not be established": find out what the server said.
			if why := c.diagnose(ctx); why != "" && !strings.Contains(err.Error(), why) {
				return nil, u, fmt.Errorf("httpmeta: %s key %q at %s: %w (%s)", op, key, u, err, why)
			}
		}
		return nil, u, fmt.Errorf("httpmeta: %s key %q at %s: %w", op, key, u, err)
	}
	return resp, u, nil
}

// diagnose runs tlsconfig.Diagnose against the server, bounded by 2 s and
// ctx, and returns its finding with tlsconfig.Hint's advice, or "".
func (c *Client) diagnose(ctx context.Context) string {
	host := c.base.Host
	if c.base.Port() == "" {
		host = net.JoinHostPort(c.base.Hostname(), "443")
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := tlsconfig.Diagnose(dctx, host, c.tls)
	if err == nil {
		return ""
	}
	if h := tlsconfig.Hint(err, true); h != "" {
		return err.Error() + "; " + h
	}
	return err.Error()
}

// preallocLimit is the most readAllSized allocates before bytes arrive.
const preallocLimit = 1 << 20

// readAllSized reads r to EOF. A known size (>= 0, already checked against
// the caller's cap; HTTP framing guarantees the body has exactly that many
// bytes) of at most preallocLimit is read into one allocation instead of a
// doubling buffer; a larger one grows as its bytes arrive, so a peer that
// only announces a large body costs little memory. Errors: r's, and
// io.ErrUnexpectedEOF for a body shorter than size.
func readAllSized(r io.Reader, size int64) ([]byte, error) {
	switch {
	case size < 0:
		return io.ReadAll(r)
	case size <= preallocLimit:
		buf := make([]byte, size)
		if _, err := io.ReadFull(r, buf); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return buf, nil
	}
	var buf bytes.Buffer
	buf.Grow(preallocLimit)
	if n, err := io.CopyN(&buf, r, size); n != size {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf.Bytes(), nil
}

// drainClose reads a bounded remainder of body so the connection can be
// reused, then closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}

// StatusError is returned by Client calls that get an HTTP status the
// protocol does not define for the call (anything but 200, and 404 on Get and
// Delete). Match with errors.As.
type StatusError struct {
	Method     string // HTTP method: GET, PUT or DELETE
	Key        string // the metadata key, unescaped
	URL        string // the request URL
	StatusCode int    // the HTTP status code
	Body       string // the start of the response body, trimmed
}

// Error names the method, key, URL, status and the start of the body.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("httpmeta: %s key %q at %s: unexpected status %d %s",
		strings.ToLower(e.Method), e.Key, e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

func newStatusError(method, key, u string, resp *http.Response) *StatusError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody)) // best effort
	return &StatusError{
		Method:     method,
		Key:        key,
		URL:        u,
		StatusCode: resp.StatusCode,
		Body:       strings.TrimSpace(string(b)),
	}
}
