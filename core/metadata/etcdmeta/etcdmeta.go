package etcdmeta

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mooncake-go/mooncake/core/metadata"
)

// Defaults of New.
const (
	// DefaultDialTimeout bounds the reachability probe New performs, as
	// upstream's etcd client config (DialTimeout 5 s).
	DefaultDialTimeout = 5 * time.Second
	// DefaultRequestTimeout bounds each Get, Put and Delete on top of the
	// caller's ctx.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultMaxRequestBytes is the client-side cap on one request (key,
	// value and framing). The server's --max-request-bytes (1.5 MiB unless
	// raised) is usually the tighter limit.
	DefaultMaxRequestBytes = 64 << 20
)

// Errors of this package, matched with errors.Is. Errors about keys also
// wrap the metadata sentinels (metadata.ErrNotFound, metadata.ErrInvalidKey).
var (
	// ErrUnreachable is returned (wrapped, naming the endpoints) by New when
	// no endpoint answered within the dial timeout.
	ErrUnreachable = errors.New("etcdmeta: etcd unreachable")
	// ErrClosed is returned (wrapped) by calls on a closed Store.
	ErrClosed = errors.New("etcdmeta: store closed")
)

// Option configures New and NewFromConnString.
type Option func(*config)

type config struct {
	dialTimeout     time.Duration
	requestTimeout  time.Duration
	maxRequestBytes int
	logger          *zap.Logger
	tls             *tls.Config
}

// WithDialTimeout bounds the reachability probe New runs before returning
// (default DefaultDialTimeout). New rejects d <= 0.
func WithDialTimeout(d time.Duration) Option {
	return func(c *config) { c.dialTimeout = d }
}

// WithRequestTimeout bounds each Get, Put and Delete in addition to the
// caller's ctx (default DefaultRequestTimeout). Zero means the caller's ctx
// alone bounds a call; New rejects d < 0.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) { c.requestTimeout = d }
}

// WithMaxRequestBytes sets the client-side cap on one request, key and
// value included (default DefaultMaxRequestBytes). New rejects n <= 0.
func WithMaxRequestBytes(n int) Option {
	return func(c *config) { c.maxRequestBytes = n }
}

// WithTLSConfig makes the etcd client use TLS with tc (for a
// core/tlsconfig identity, its Client()): the CA bundle of etcd's server
// certificate and, for etcd's --client-cert-auth, a client certificate.
// nil = plaintext (the default). Ours: upstream reads no etcd TLS
// settings.
func WithTLSConfig(tc *tls.Config) Option {
	return func(c *config) { c.tls = tc }
}

// WithLogger gives the etcd client a logger (default: none, zap.NewNop). A
// nil logger means the default.
func WithLogger(lg *zap.Logger) Option {
	return func(c *config) { c.logger = lg }
}

// Store is a metadata.Store over etcd. It is safe for concurrent use.
type Store struct {
	cli            *clientv3.Client
	endpoints      []string // as given to New; never mutated
	requestTimeout time.Duration
	closed         atomic.Bool
	closeOnce      sync.Once
	closeErr       error // set once, by closeOnce
}

var _ metadata.Store = (*Store)(nil)

// New connects to the etcd cluster at endpoints ("host:port", or a URL such
// as "http://host:port") and checks that one of them answers a read within
// the dial timeout. ctx bounds that check only; it is not retained.
//
// It returns an error for an empty endpoint list or an invalid option, an
// error wrapping ErrUnreachable when no endpoint answered within the dial
// timeout, and one wrapping ctx.Err() when ctx ends first.
func New(ctx context.Context, endpoints []string, opts ...Option) (*Store, error) {
	cfg := config{
		dialTimeout:     DefaultDialTimeout,
		requestTimeout:  DefaultRequestTimeout,
		maxRequestBytes: DefaultMaxRequestBytes,
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case len(endpoints) == 0:
		return nil, errors.New("etcdmeta: no endpoints")
	case slices.Contains(endpoints, ""):
		return nil, fmt.Errorf("etcdmeta: empty endpoint in %q", endpoints)
	case cfg.dialTimeout <= 0:
		return nil, fmt.Errorf("etcdmeta: dial timeout %v must be positive", cfg.dialTimeout)
	case cfg.requestTimeout < 0:
		return nil, fmt.Errorf("etcdmeta: request timeout %v must not be negative", cfg.requestTimeout)
	case cfg.maxRequestBytes <= 0:
		return nil, fmt.Errorf("etcdmeta: max request bytes %d must be positive", cfg.maxRequestBytes)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdmeta: connect to %q: %w", endpoints, err)
	}
	lg := cfg.logger
	if lg == nil {
		lg = zap.NewNop()
	}
	eps := slices.Clone(endpoints)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:          slices.Clone(eps),
		DialTimeout:        cfg.dialTimeout,
		MaxCallSendMsgSize: cfg.maxRequestBytes,
		MaxCallRecvMsgSize: math.MaxInt32,
		Logger:             lg,
		TLS:                cfg.tls,
	})
	if err != nil {
		return nil, fmt.Errorf("etcdmeta: connect to %q: %w", eps, err)
	}
	if err := probe(ctx, cli, eps, cfg.dialTimeout); err != nil {
		_ = cli.Close()
		return nil, err
	}
	return &Store{cli: cli, endpoints: eps, requestTimeout: cfg.requestTimeout}, nil
}

// probe does one cheap serializable read (answered by any member, leader or
// not) so that New fails fast on an unreachable cluster.
func probe(ctx context.Context, cli *clientv3.Client, eps []string, d time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := cli.Get(pctx, metadata.KeyPrefix, clientv3.WithSerializable(), clientv3.WithCountOnly())
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("etcdmeta: connect to %q: %w", eps, ctx.Err())
	case pctx.Err() != nil:
		return fmt.Errorf("%w: no answer from %q within dial timeout %v: %w", ErrUnreachable, eps, d, err)
	default:
		return fmt.Errorf("etcdmeta: connect to %q: %w", eps, err)
	}
}

// NewFromConnString is New for a metadata connection string that
// metadata.ParseConnString classifies as etcd: "etcd://h1:2379,h2:2379" or a
// bare "host:port". Any other string (a Redis or HTTP one, P2PHANDSHAKE,
// garbage) returns an error wrapping metadata.ErrInvalidConnString.
func NewFromConnString(ctx context.Context, s string, opts ...Option) (*Store, error) {
	kind, target, err := metadata.ParseConnString(s)
	if err != nil {
		return nil, fmt.Errorf("etcdmeta: %w", err)
	}
	if kind != metadata.KindEtcd {
		return nil, fmt.Errorf("etcdmeta: %w %q: a %s connection string, not etcd", metadata.ErrInvalidConnString, s, kind)
	}
	return New(ctx, strings.Split(target, ","), opts...)
}

// Endpoints returns a copy of the endpoints the Store was created with.
func (s *Store) Endpoints() []string { return slices.Clone(s.endpoints) }

// begin checks key, ctx and the Store's state before any I/O, and derives
// the per-request context.
func (s *Store) begin(ctx context.Context, op, key string) (context.Context, context.CancelFunc, error) {
	if key == "" {
		return nil, nil, fmt.Errorf("etcdmeta: %s: %w: empty key", op, metadata.ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("etcdmeta: %s key %q: %w", op, key, err)
	}
	if s.closed.Load() {
		return nil, nil, fmt.Errorf("etcdmeta: %s key %q: %w", op, key, ErrClosed)
	}
	if s.requestTimeout > 0 {
		rctx, cancel := context.WithTimeout(ctx, s.requestTimeout)
		return rctx, cancel, nil
	}
	return ctx, func() {}, nil
}

// fail wraps an error from the etcd client, keeping the caller's ctx error
// and naming the request timeout when that is what expired.
func (s *Store) fail(ctx, rctx context.Context, op, key string, err error) error {
	switch {
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("etcdmeta: %s key %q: %w: %w", op, key, ctx.Err(), err)
	case ctx.Err() == nil && rctx.Err() != nil:
		return fmt.Errorf("etcdmeta: %s key %q: request timeout %v exceeded: %w", op, key, s.requestTimeout, err)
	case s.closed.Load():
		return fmt.Errorf("etcdmeta: %s key %q: %w: %w", op, key, ErrClosed, err)
	}
	return fmt.Errorf("etcdmeta: %s key %q: %w", op, key, err)
}

// Get returns the value under key (a linearizable single-key read). It
// returns an error wrapping metadata.ErrNotFound, naming the key, when the
// key is absent; metadata.ErrInvalidKey for an empty key; and etcd or ctx
// errors wrapped with the key. The returned slice is the caller's; an empty
// stored value comes back as a non-nil empty slice.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	rctx, cancel, err := s.begin(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	defer cancel()
	resp, err := s.cli.Get(rctx, key)
	if err != nil {
		return nil, s.fail(ctx, rctx, "get", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("etcdmeta: get key %q: %w", key, metadata.ErrNotFound)
	}
	// The client decodes each response into fresh memory, so Value is
	// already the caller's.
	v := resp.Kvs[0].Value
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// Put stores value under key, replacing any previous value. It returns
// metadata.ErrInvalidKey for an empty key and etcd or ctx errors wrapped with
// the key (etcd's "request is too large" when key and value exceed the
// server's --max-request-bytes). It does not retain value.
func (s *Store) Put(ctx context.Context, key string, value []byte) error {
	rctx, cancel, err := s.begin(ctx, "put", key)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.cli.Put(rctx, key, string(value)); err != nil {
		return s.fail(ctx, rctx, "put", key, err)
	}
	return nil
}

// Delete removes key. It returns an error wrapping metadata.ErrNotFound,
// naming the key, when etcd deleted nothing; metadata.ErrInvalidKey for an
// empty key; and etcd or ctx errors wrapped with the key.
func (s *Store) Delete(ctx context.Context, key string) error {
	rctx, cancel, err := s.begin(ctx, "delete", key)
	if err != nil {
		return err
	}
	defer cancel()
	resp, err := s.cli.Delete(rctx, key)
	if err != nil {
		return s.fail(ctx, rctx, "delete", key, err)
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("etcdmeta: delete key %q: %w", key, metadata.ErrNotFound)
	}
	return nil
}

// Close releases the etcd connection. Calls in flight fail; later calls
// return an error wrapping ErrClosed. Close is idempotent and returns the
// first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			s.closeErr = fmt.Errorf("etcdmeta: close: %w", err)
		}
	})
	return s.closeErr
}
