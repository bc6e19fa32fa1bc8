package p2p

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	mrand "math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// Defaults of Config.
const (
	// DefaultMaxShardSize is the shard size Register uses for maxShardSize
	// 0: 64 MiB, as upstream's examples.
	DefaultMaxShardSize = 64 << 20
	// DefaultPrefix is the etcd key prefix of the store's metadata
	// (upstream uses "mooncake/checkpoint/"; ours differs because the
	// layouts differ).
	DefaultPrefix = "mooncake/p2p/"
	// DefaultLeaseTTL is the etcd lease of a store's holder keys: a dead
	// store's holders vanish within it.
	DefaultLeaseTTL = 10 * time.Second
	// DefaultConcurrency is how many shards GetReplica fetches at once.
	DefaultConcurrency = 8
	// DefaultClaimWait is how long GetReplica waits for a shard another
	// store is fetching from the origin before reading it itself.
	DefaultClaimWait = 5 * time.Second
	// DefaultHolderWait is how long GetReplica waits for a shard that has
	// no usable holder before failing with ErrNoHolder.
	DefaultHolderWait = 10 * time.Second
)

// cleanupTimeout bounds the etcd calls that undo a failed operation.
const cleanupTimeout = 5 * time.Second

// txnOps bounds the operations of one etcd transaction (etcd's default
// --max-txn-ops is 128).
const txnOps = 64

// Errors of this package, matched with errors.Is; the wrapping error names
// the object. They mirror upstream's ErrInvalidArgument, ErrPayloadOpened,
// ErrPayloadNotOpened, ErrPayloadNotFound and ErrTooManyRetries.
var (
	// ErrInvalidArgument: empty name, no buffers, an empty buffer, a bad
	// Config field.
	ErrInvalidArgument = errors.New("p2p: invalid argument")
	// ErrOpened: this store already registered or fetched the name.
	ErrOpened = errors.New("p2p: object already held by this store")
	// ErrNotOpened: Unregister or DeleteReplica of a name this store does
	// not hold (or holds the other way: Unregister of a fetched copy).
	ErrNotOpened = errors.New("p2p: object not held by this store")
	// ErrExists: Register of a name another store registered.
	ErrExists = errors.New("p2p: object already exists")
	// ErrNotFound: GetReplica of a name with no object in etcd.
	ErrNotFound = errors.New("p2p: object not found")
	// ErrSizeMismatch: GetReplica's buffer sizes differ from the object's
	// size list.
	ErrSizeMismatch = errors.New("p2p: buffer sizes differ from the object's")
	// ErrNoHolder: a shard had no holder that served it intact within
	// Config.HolderWait.
	ErrNoHolder = errors.New("p2p: no holder could serve the shard")
	// ErrClosed: a call on a closed Store.
	ErrClosed = errors.New("p2p: store closed")
)

// Config configures New. Zero values take the documented defaults.
type Config struct {
	// Etcd is the etcd endpoint list ("host:port"). Required.
	Etcd []string
	// Name is this store's segment name, unique among the stores sharing
	// the etcd (upstream localSegmentName). Default "p2p-<hostname>-<random
	// hex>".
	Name string
	// Prefix is the etcd key prefix; default DefaultPrefix.
	Prefix string
	// BindHost is the host the tcp data plane listens on and publishes;
	// default 127.0.0.1.
	BindHost string
	// LeaseTTL is the lease of this store's holder keys; default
	// DefaultLeaseTTL; at least 1 s (etcd's granularity).
	LeaseTTL time.Duration
	// Concurrency bounds shards fetched at once by one GetReplica; default
	// DefaultConcurrency.
	Concurrency int
	// HolderWait bounds how long a shard without a usable holder is
	// re-listed; default DefaultHolderWait.
	HolderWait time.Duration
	// ClaimWait bounds how long a shard another store claimed (is fetching
	// from the origin) is left to it before this store reads it from any
	// holder; default DefaultClaimWait.
	ClaimWait time.Duration
	// OriginOnly makes GetReplica read every shard from the object's
	// origin (the registering store) and announce nothing: the naive
	// baseline of the benchmark. Not for production.
	OriginOnly bool
	// BeforeRead, if set, runs before each shard read from holder (n
	// bytes); an error fails that read as a transfer error would. For
	// benchmarks that emulate per-node link bandwidth (mooncake bench p2p
	// --link-rate); nil in production.
	BeforeRead func(ctx context.Context, holder string, n uint64) error
	// DialTimeout bounds the etcd reachability check of New; default
	// etcdmeta.DefaultDialTimeout.
	DialTimeout time.Duration
	// Logger receives the etcd clients' logs; default none.
	Logger *zap.Logger
}

// PayloadInfo describes one object (upstream PayloadInfo plus Shards and
// Holders).
type PayloadInfo struct {
	Name         string
	MaxShardSize uint64   // bytes
	TotalSize    uint64   // bytes, the sum of SizeList
	SizeList     []uint64 // bytes of each buffer, in order
	Shards       int      // number of shards
	Origin       string   // segment name of the registering store
	// Holders is the number of stores (origin included) holding at least
	// one shard now.
	Holders int
	// Labels are the buffers' labels given to Register (WithLabels), or
	// nil. The CLI stores file names here.
	Labels []string
}

// Option is an optional argument of Register or GetReplica.
type Option func(*opts)

type opts struct {
	labels   []string
	progress func(done, total uint64)
}

// WithLabels gives Register one label per buffer (e.g. a file name),
// returned by List in PayloadInfo.Labels; Register fails with
// ErrInvalidArgument when the count differs from the buffers'.
func WithLabels(labels ...string) Option { return func(o *opts) { o.labels = labels } }

// WithProgress makes GetReplica call f after each shard landed and was
// verified, with the bytes done so far and the object's total; f runs on
// a fetching goroutine, calls are serialized.
func WithProgress(f func(done, total uint64)) Option { return func(o *opts) { o.progress = f } }

func collect(os []Option) opts {
	var o opts
	for _, f := range os {
		f(&o)
	}
	return o
}

// Stats are a Store's GetReplica counters since New.
type Stats struct {
	BytesFetched    uint64 // shard bytes that landed and verified
	BytesFromOrigin uint64 // of those, read from the object's origin
	ShardsFetched   uint64
	Retries         uint64 // failed reads and checksum mismatches
}

// objectMeta is the JSON at <prefix>objects/<name>.
type objectMeta struct {
	Name         string      `json:"name"`
	Gen          string      `json:"gen"`
	Origin       string      `json:"origin"`
	Size         uint64      `json:"size"`
	MaxShardSize uint64      `json:"max_shard_size"`
	SizeList     []uint64    `json:"size_list"`
	Shards       []shardMeta `json:"shards"`
	Labels       []string    `json:"labels,omitempty"`
}

// shardMeta is one shard: Length bytes at Offset of buffer Buf.
type shardMeta struct {
	Buf    int    `json:"buf"`
	Offset uint64 `json:"offset"`
	Length uint64 `json:"length"`
	CRC32C uint32 `json:"crc32c"`
}

// holderVal is the JSON of a holder key: the shard's address in Segment.
type holderVal struct {
	Segment string `json:"segment"`
	Addr    uint64 `json:"addr"`
}

// held is an object this store registered (origin) or fetched.
type held struct {
	meta   objectMeta
	bufs   [][]byte
	origin bool
	ready  bool // GetReplica finished; until then the name is reserved
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Store is one node of the P2P store: an etcd session and a transfer
// engine. See the package doc.
type Store struct {
	cfg    Config
	cli    *clientv3.Client
	meta   *etcdmeta.Store
	eng    *transfer.Engine
	lease  clientv3.LeaseID
	cancel context.CancelFunc // stops the keepalive
	kaDone chan struct{}
	closed atomic.Bool

	randMu sync.Mutex
	rnd    *mrand.Rand // guarded by randMu

	stats struct{ fetched, fromOrigin, shards, retries atomic.Uint64 }

	// testFetched, if set (tests), runs after shard i landed from holder.
	testFetched func(i int, holder string)

	mu struct {
		sync.Mutex
		held map[string]*held
	}
}

// NewP2PStore is upstream's constructor: metadataURI is an etcd endpoint
// list ("host:port[,host:port...]", an "etcd://" prefix allowed) and
// localSegmentName this store's segment name. Errors as New.
func NewP2PStore(ctx context.Context, metadataURI, localSegmentName string) (*Store, error) {
	uri := strings.TrimPrefix(metadataURI, "etcd://")
	var eps []string
	for _, e := range strings.Split(uri, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return New(ctx, Config{Etcd: eps, Name: localSegmentName})
}

// New connects to etcd, grants this store's lease and starts its transfer
// engine (tcp on cfg.BindHost, an ephemeral port). ctx bounds the setup
// only. Errors: ErrInvalidArgument for a bad Config; one wrapping
// etcdmeta.ErrUnreachable when etcd does not answer within the dial
// timeout; the engine's error (e.g. the segment name is taken by a live
// store).
func New(ctx context.Context, cfg Config) (_ *Store, err error) {
	if len(cfg.Etcd) == 0 {
		return nil, fmt.Errorf("%w: no etcd endpoints", ErrInvalidArgument)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.BindHost == "" {
		cfg.BindHost = "127.0.0.1"
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.HolderWait == 0 {
		cfg.HolderWait = DefaultHolderWait
	}
	if cfg.ClaimWait == 0 {
		cfg.ClaimWait = DefaultClaimWait
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = etcdmeta.DefaultDialTimeout
	}
	switch {
	case cfg.LeaseTTL < time.Second:
		return nil, fmt.Errorf("%w: lease TTL %v is under 1s", ErrInvalidArgument, cfg.LeaseTTL)
	case cfg.Concurrency < 0:
		return nil, fmt.Errorf("%w: concurrency %d is negative", ErrInvalidArgument, cfg.Concurrency)
	case cfg.ClaimWait < 0:
		return nil, fmt.Errorf("%w: claim wait %v is negative", ErrInvalidArgument, cfg.ClaimWait)
	case cfg.HolderWait < 0:
		return nil, fmt.Errorf("%w: holder wait %v is negative", ErrInvalidArgument, cfg.HolderWait)
	}
	if cfg.Name == "" {
		h, _ := os.Hostname()
		cfg.Name = "p2p-" + h + "-" + randHex(4)
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	s := &Store{cfg: cfg, rnd: mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64()))}
	s.mu.held = map[string]*held{}
	defer func() {
		if err != nil {
			s.teardown()
		}
	}()
	if s.meta, err = etcdmeta.New(ctx, cfg.Etcd, etcdmeta.WithDialTimeout(cfg.DialTimeout), etcdmeta.WithLogger(lg)); err != nil {
		return nil, fmt.Errorf("p2p: store %q: %w", cfg.Name, err)
	}
	if s.cli, err = clientv3.New(clientv3.Config{Endpoints: slices.Clone(cfg.Etcd), DialTimeout: cfg.DialTimeout, Logger: lg}); err != nil {
		return nil, fmt.Errorf("p2p: store %q: etcd client: %w", cfg.Name, err)
	}
	lr, err := s.cli.Grant(ctx, int64((cfg.LeaseTTL+time.Second-1)/time.Second))
	if err != nil {
		return nil, fmt.Errorf("p2p: store %q: grant lease: %w", cfg.Name, err)
	}
	s.lease = lr.ID
	kctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ka, err := s.cli.KeepAlive(kctx, s.lease)
	if err != nil {
		return nil, fmt.Errorf("p2p: store %q: keep lease alive: %w", cfg.Name, err)
	}
	s.kaDone = make(chan struct{})
	go func() {
		defer close(s.kaDone)
		for range ka { // drain the renewals; the channel closes with kctx or a lost lease
		}
	}()
	tr := tcp.New(tcp.Config{BindAddr: net.JoinHostPort(cfg.BindHost, "0")})
	if s.eng, err = transfer.New(ctx, transfer.Config{Name: cfg.Name, Metadata: s.meta, Transport: tr}); err != nil {
		return nil, fmt.Errorf("p2p: store %q: %w", cfg.Name, err)
	}
	return s, nil
}

// Name returns this store's segment name.
func (s *Store) Name() string { return s.cfg.Name }

// Stats returns the GetReplica counters.
func (s *Store) Stats() Stats {
	return Stats{s.stats.fetched.Load(), s.stats.fromOrigin.Load(), s.stats.shards.Load(), s.stats.retries.Load()}
}

func (s *Store) objKey(name string) string { return s.cfg.Prefix + "objects/" + name }

func (s *Store) holderDir(gen string, shard int) string {
	return s.cfg.Prefix + "holders/" + gen + "/" + strconv.Itoa(shard) + "/"
}

// Register publishes bufs (upstream addrList/sizeList, one slice per
// buffer, in order) as object name without copying: each buffer is
// registered with this store's engine (location, e.g. "cpu:0"), split into
// shards of maxShardSize bytes (0: DefaultMaxShardSize) whose CRC-32C is
// computed, and the object and this store as holder of every shard are
// written to etcd. bufs must stay allocated and unmodified until
// Unregister or Close. Errors: ErrInvalidArgument, ErrClosed, ErrOpened
// (this store holds name), ErrExists (another object of that name is in
// etcd; upstream's Register without forceCreate), the engine's or etcd's
// error; on error nothing stays registered.
func (s *Store) Register(ctx context.Context, name string, bufs [][]byte, maxShardSize uint64, location string, options ...Option) (err error) {
	if err := s.checkArgs(name, bufs); err != nil {
		return err
	}
	o := collect(options)
	if o.labels != nil && len(o.labels) != len(bufs) {
		return fmt.Errorf("%w: %q: %d labels for %d buffers", ErrInvalidArgument, name, len(o.labels), len(bufs))
	}
	if maxShardSize == 0 {
		maxShardSize = DefaultMaxShardSize
	}
	if location == "" {
		location = "cpu:0"
	}
	m := objectMeta{Name: name, Gen: randHex(8), Origin: s.cfg.Name, MaxShardSize: maxShardSize, Labels: o.labels}
	for i, b := range bufs {
		m.SizeList = append(m.SizeList, uint64(len(b)))
		m.Size += uint64(len(b))
		for off := uint64(0); off < uint64(len(b)); off += maxShardSize {
			n := min(maxShardSize, uint64(len(b))-off)
			m.Shards = append(m.Shards, shardMeta{Buf: i, Offset: off, Length: n, CRC32C: crc32.Checksum(b[off:off+n], castagnoli)})
		}
	}
	if err := s.reserve(name, &held{meta: m, bufs: bufs, origin: true}); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			s.release(name)
		}
	}()
	if err := s.registerBufs(ctx, bufs, location); err != nil {
		return fmt.Errorf("p2p: register %q: %w", name, err)
	}
	defer func() {
		if err != nil {
			s.unregisterBufs(bufs)
		}
	}()
	v, _ := json.Marshal(m)
	key := s.objKey(name)
	tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(v))).Commit()
	if err != nil {
		return fmt.Errorf("p2p: register %q: etcd: %w", name, err)
	}
	if !tr.Succeeded {
		return fmt.Errorf("%w: %q", ErrExists, name)
	}
	all := make([]int, len(m.Shards))
	for i := range all {
		all[i] = i
	}
	if err := s.announce(ctx, m, bufs, all); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		_, _ = s.cli.Delete(cctx, key)
		cancel()
		return fmt.Errorf("p2p: register %q: %w", name, err)
	}
	s.markReady(name)
	return nil
}

// Unregister stops serving an object this store registered (upstream
// Unregister): its holder keys are deleted, its buffers unregistered from
// the engine (the memory is the caller's again), and the object's metadata
// deleted if no other store holds any shard; otherwise later GetReplica
// calls fetch from those peers. Errors: ErrNotOpened (not registered
// here), ErrClosed, etcd's error (the object is then still served and
// registered: call again).
func (s *Store) Unregister(ctx context.Context, name string) error { return s.drop(ctx, name, true) }

// DeleteReplica stops serving an object this store fetched with
// GetReplica (upstream DeleteReplica); otherwise as Unregister.
func (s *Store) DeleteReplica(ctx context.Context, name string) error {
	return s.drop(ctx, name, false)
}

func (s *Store) drop(ctx context.Context, name string, origin bool) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.mu.Lock()
	h, ok := s.mu.held[name]
	if !ok || !h.ready || h.origin != origin {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNotOpened, name)
	}
	h.ready = false // reserved while we tear it down
	s.mu.Unlock()
	if err := s.unannounce(ctx, h.meta); err != nil {
		s.markReady(name) // still (partly) announced: still ours, retry later
		return fmt.Errorf("p2p: stop serving %q: %w", name, err)
	}
	s.unregisterBufs(h.bufs)
	s.release(name)
	// Delete the object when nobody holds any shard any more.
	rest, err := s.cli.Get(ctx, s.cfg.Prefix+"holders/"+h.meta.Gen+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err == nil && rest.Count == 0 {
		// Delete only our generation, and only if nobody changed it since.
		key := s.objKey(name)
		if g, err := s.cli.Get(ctx, key); err == nil && len(g.Kvs) == 1 {
			var cur objectMeta
			if json.Unmarshal(g.Kvs[0].Value, &cur) == nil && cur.Gen == h.meta.Gen {
				_, _ = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", g.Kvs[0].ModRevision)).Then(clientv3.OpDelete(key)).Commit()
			}
		}
	}
	return nil
}

// List returns the objects whose name starts with namePrefix ("" lists
// all), sorted by name (upstream List). Errors: ErrClosed, etcd's error.
func (s *Store) List(ctx context.Context, namePrefix string) ([]PayloadInfo, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	r, err := s.cli.Get(ctx, s.objKey(namePrefix), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("p2p: list %q: etcd: %w", namePrefix, err)
	}
	var out []PayloadInfo
	for _, kv := range r.Kvs {
		var m objectMeta
		if json.Unmarshal(kv.Value, &m) != nil {
			continue
		}
		hr, err := s.cli.Get(ctx, s.cfg.Prefix+"holders/"+m.Gen+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return nil, fmt.Errorf("p2p: list %q: etcd: %w", namePrefix, err)
		}
		segs := map[string]bool{}
		for _, hk := range hr.Kvs {
			k := string(hk.Key)
			// <prefix>holders/<gen>/<shard>/<segment>
			rest := k[len(s.cfg.Prefix+"holders/"+m.Gen+"/"):]
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				segs[rest[i+1:]] = true
			}
		}
		out = append(out, PayloadInfo{Name: m.Name, MaxShardSize: m.MaxShardSize, TotalSize: m.Size,
			SizeList: m.SizeList, Shards: len(m.Shards), Origin: m.Origin, Holders: len(segs), Labels: m.Labels})
	}
	slices.SortFunc(out, func(a, b PayloadInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Info returns the description of the object called name (List of one name). Errors:
// ErrNotFound, ErrClosed, etcd's error.
func (s *Store) Info(ctx context.Context, name string) (PayloadInfo, error) {
	l, err := s.List(ctx, name)
	if err != nil {
		return PayloadInfo{}, err
	}
	for _, p := range l {
		if p.Name == name {
			return p, nil
		}
	}
	return PayloadInfo{}, fmt.Errorf("%w: %q", ErrNotFound, name)
}

// GetReplica fetches object name into bufs (upstream addrList/sizeList:
// one slice per buffer, lengths equal to the object's size list) and then
// serves it: bufs are registered with the engine, shards are read in
// parallel from random holders (see the package doc), verified against
// their CRC-32C and announced one by one. bufs must stay allocated and
// unmodified until DeleteReplica or Close. Errors: ErrInvalidArgument,
// ErrClosed, ErrOpened, ErrNotFound, ErrSizeMismatch, ErrNoHolder (naming
// the shard), ctx's error, etcd's error; on error nothing of the object is
// announced or registered any more.
func (s *Store) GetReplica(ctx context.Context, name string, bufs [][]byte, options ...Option) (err error) {
	if err := s.checkArgs(name, bufs); err != nil {
		return err
	}
	o := collect(options)
	g, err := s.cli.Get(ctx, s.objKey(name))
	if err != nil {
		return fmt.Errorf("p2p: get %q: etcd: %w", name, err)
	}
	if len(g.Kvs) == 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	var m objectMeta
	if err := json.Unmarshal(g.Kvs[0].Value, &m); err != nil {
		return fmt.Errorf("p2p: get %q: bad metadata: %w", name, err)
	}
	if len(bufs) != len(m.SizeList) {
		return fmt.Errorf("%w: %q has %d buffers, got %d", ErrSizeMismatch, name, len(m.SizeList), len(bufs))
	}
	for i, b := range bufs {
		if uint64(len(b)) != m.SizeList[i] {
			return fmt.Errorf("%w: %q buffer %d is %d bytes, got %d", ErrSizeMismatch, name, i, m.SizeList[i], len(b))
		}
	}
	if err := s.reserve(name, &held{meta: m, bufs: bufs}); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			s.release(name)
		}
	}()
	if err := s.registerBufs(ctx, bufs, "cpu:0"); err != nil {
		return fmt.Errorf("p2p: get %q: %w", name, err)
	}
	defer func() {
		if err != nil && !s.closed.Load() { // Close already withdrew everything
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			_ = s.unannounce(cctx, m)
			cancel()
			s.unregisterBufs(bufs)
		}
	}()

	sch := &schedule{pending: make(map[int]bool, len(m.Shards)), since: map[int]time.Time{}}
	for i := range m.Shards {
		sch.pending[i] = true
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		progMu   sync.Mutex
		done     uint64
	)
	for range min(s.cfg.Concurrency, len(m.Shards)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i, claimed, err := s.pick(fctx, m, sch)
				if err == nil && i < 0 {
					return
				}
				if err == nil {
					err = s.fetchShard(fctx, m, bufs, i)
				}
				if claimed && !s.closed.Load() {
					cctx, ccancel := context.WithTimeout(context.WithoutCancel(fctx), cleanupTimeout)
					_, _ = s.cli.Delete(cctx, s.claimKey(m.Gen, i))
					ccancel()
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				if o.progress != nil {
					progMu.Lock()
					done += m.Shards[i].Length
					o.progress(done, m.Size)
					progMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil && fctx.Err() != nil {
		firstErr = fmt.Errorf("p2p: get %q: %w", name, ctx.Err())
	}
	if firstErr != nil && s.closed.Load() {
		return fmt.Errorf("%w: get %q interrupted: %v", ErrClosed, name, firstErr)
	}
	if firstErr != nil {
		return firstErr
	}
	s.markReady(name)
	return nil
}

// schedule is the shards of one GetReplica not yet taken by a worker.
type schedule struct {
	mu      sync.Mutex
	pending map[int]bool      // shard index -> not yet taken
	since   map[int]time.Time // when a pending shard was first seen claimed by another store
}

func (s *Store) claimKey(gen string, i int) string {
	return s.cfg.Prefix + "claims/" + gen + "/" + strconv.Itoa(i)
}

// pick takes the next shard for a worker and returns its index, or -1
// when none is left. The policy keeps the origin's outbound traffic near
// one copy of the object: first a shard some peer already holds (random
// among those); else a shard nobody is fetching from the origin, claimed
// in etcd (claimed true: the caller deletes the claim when done); else
// it waits for the claimed shards to land at their claimants, up to
// Config.ClaimWait per shard, then takes one anyway. With
// Config.OriginOnly it takes pending shards in random order.
func (s *Store) pick(ctx context.Context, m objectMeta, sch *schedule) (int, bool, error) {
	backoff := 2 * time.Millisecond
	for {
		if s.closed.Load() {
			return 0, false, ErrClosed
		}
		sch.mu.Lock()
		n := len(sch.pending)
		sch.mu.Unlock()
		if n == 0 {
			return -1, false, nil
		}
		var peerHeld, claimed map[int]bool
		if !s.cfg.OriginOnly {
			var err error
			if peerHeld, err = s.shardSet(ctx, s.cfg.Prefix+"holders/"+m.Gen+"/", func(seg string) bool { return seg != m.Origin && seg != s.cfg.Name }); err != nil {
				return 0, false, fmt.Errorf("p2p: get %q: etcd: %w", m.Name, err)
			}
			if claimed, err = s.shardSet(ctx, s.cfg.Prefix+"claims/"+m.Gen+"/", nil); err != nil {
				return 0, false, fmt.Errorf("p2p: get %q: etcd: %w", m.Name, err)
			}
		}
		sch.mu.Lock()
		var held, free, overdue []int
		now := time.Now()
		for i := range sch.pending {
			switch {
			case peerHeld[i]:
				held = append(held, i)
				delete(sch.since, i)
			case !claimed[i]:
				free = append(free, i)
				delete(sch.since, i)
			default:
				t, ok := sch.since[i]
				if !ok {
					sch.since[i] = now
				} else if now.Sub(t) >= s.cfg.ClaimWait {
					overdue = append(overdue, i)
				}
			}
		}
		take := func(l []int) int {
			s.randMu.Lock()
			i := l[s.rnd.IntN(len(l))]
			s.randMu.Unlock()
			delete(sch.pending, i)
			return i
		}
		if len(held) > 0 {
			i := take(held)
			sch.mu.Unlock()
			return i, false, nil
		}
		if len(overdue) > 0 {
			i := take(overdue)
			sch.mu.Unlock()
			return i, false, nil
		}
		if s.cfg.OriginOnly && len(free) > 0 {
			i := take(free)
			sch.mu.Unlock()
			return i, false, nil
		}
		sch.mu.Unlock()
		s.randMu.Lock()
		s.rnd.Shuffle(len(free), func(a, b int) { free[a], free[b] = free[b], free[a] })
		s.randMu.Unlock()
		for _, i := range free {
			key := s.claimKey(m.Gen, i)
			tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, s.cfg.Name, clientv3.WithLease(s.lease))).Commit()
			if err != nil {
				return 0, false, fmt.Errorf("p2p: get %q: claim shard %d: etcd: %w", m.Name, i, err)
			}
			if !tr.Succeeded {
				continue
			}
			sch.mu.Lock()
			ok := sch.pending[i]
			delete(sch.pending, i)
			sch.mu.Unlock()
			if ok {
				return i, true, nil
			}
			_, _ = s.cli.Delete(ctx, key) // another worker of ours took it meanwhile
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, false, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// shardSet returns the shard indexes under dir (keys dir<shard>[/<segment>])
// whose segment passes keep (nil: every key).
func (s *Store) shardSet(ctx context.Context, dir string, keep func(seg string) bool) (map[int]bool, error) {
	r, err := s.cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	out := map[int]bool{}
	for _, kv := range r.Kvs {
		rest := string(kv.Key[len(dir):])
		idx, seg, _ := strings.Cut(rest, "/")
		i, err := strconv.Atoi(idx)
		if err != nil || (keep != nil && !keep(seg)) {
			continue
		}
		out[i] = true
	}
	return out, nil
}

// fetchShard reads shard i into its place in bufs from a holder, verifies
// it and announces it.
func (s *Store) fetchShard(ctx context.Context, m objectMeta, bufs [][]byte, i int) error {
	sh := m.Shards[i]
	dst := bufs[sh.Buf][sh.Offset : sh.Offset+sh.Length]
	excluded := map[string]bool{s.cfg.Name: true}
	var waitStart time.Time
	backoff := 5 * time.Millisecond
	var lastErr error
	for {
		if s.closed.Load() {
			return ErrClosed
		}
		hs, err := s.holders(ctx, m.Gen, i)
		if err != nil {
			return fmt.Errorf("p2p: get %q shard %d: etcd: %w", m.Name, i, err)
		}
		var peers, origin []holderVal
		for _, h := range hs {
			switch {
			case excluded[h.Segment]:
			case h.Segment == m.Origin:
				origin = append(origin, h)
			case !s.cfg.OriginOnly:
				peers = append(peers, h)
			}
		}
		cand := peers
		if len(cand) == 0 {
			cand = origin
		}
		if len(cand) == 0 {
			if waitStart.IsZero() {
				waitStart = time.Now()
			}
			if time.Since(waitStart) >= s.cfg.HolderWait {
				if lastErr != nil {
					return fmt.Errorf("%w: %q shard %d (%d bytes) after %v; last failure: %v", ErrNoHolder, m.Name, i, sh.Length, s.cfg.HolderWait, lastErr)
				}
				return fmt.Errorf("%w: %q shard %d (%d bytes): none listed for %v", ErrNoHolder, m.Name, i, sh.Length, s.cfg.HolderWait)
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			backoff = min(2*backoff, 500*time.Millisecond)
			continue
		}
		waitStart = time.Time{}
		s.randMu.Lock()
		h := cand[s.rnd.IntN(len(cand))]
		s.randMu.Unlock()
		err = nil
		if s.cfg.BeforeRead != nil {
			err = s.cfg.BeforeRead(ctx, h.Segment, sh.Length)
		}
		if err == nil {
			err = s.readFrom(ctx, h, dst)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.stats.retries.Add(1)
			excluded[h.Segment] = true
			lastErr = fmt.Errorf("read from %q: %w", h.Segment, err)
			continue
		}
		if crc32.Checksum(dst, castagnoli) != sh.CRC32C {
			s.stats.retries.Add(1)
			excluded[h.Segment] = true
			lastErr = fmt.Errorf("shard from %q fails its checksum", h.Segment)
			continue
		}
		s.stats.fetched.Add(sh.Length)
		s.stats.shards.Add(1)
		if h.Segment == m.Origin {
			s.stats.fromOrigin.Add(sh.Length)
		}
		if s.testFetched != nil {
			s.testFetched(i, h.Segment)
		}
		if s.cfg.OriginOnly {
			return nil
		}
		if s.closed.Load() {
			return ErrClosed
		}
		if err := s.announce(ctx, m, bufs, []int{i}); err != nil {
			return fmt.Errorf("p2p: get %q shard %d: %w", m.Name, i, err)
		}
		return nil
	}
}

// readFrom reads len(dst) bytes at h.Addr of h.Segment into dst.
func (s *Store) readFrom(ctx context.Context, h holderVal, dst []byte) error {
	seg, err := s.eng.OpenSegment(ctx, h.Segment)
	if err != nil {
		return err
	}
	return s.eng.TransferSync(ctx, []transfer.Request{{Op: transfer.Read, Source: memory.AddrOf(dst), Target: seg, TargetOffset: h.Addr, Length: uint64(len(dst))}})
}

// holders lists the current holders of shard i of generation gen.
func (s *Store) holders(ctx context.Context, gen string, i int) ([]holderVal, error) {
	r, err := s.cli.Get(ctx, s.holderDir(gen, i), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make([]holderVal, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var h holderVal
		if json.Unmarshal(kv.Value, &h) == nil && h.Segment != "" {
			out = append(out, h)
		}
	}
	return out, nil
}

// announce writes this store as holder of shards idx, under its lease.
func (s *Store) announce(ctx context.Context, m objectMeta, bufs [][]byte, idx []int) error {
	for len(idx) > 0 {
		n := min(len(idx), txnOps)
		ops := make([]clientv3.Op, 0, n)
		for _, i := range idx[:n] {
			sh := m.Shards[i]
			v, _ := json.Marshal(holderVal{Segment: s.cfg.Name, Addr: memory.AddrOf(bufs[sh.Buf]) + sh.Offset})
			ops = append(ops, clientv3.OpPut(s.holderDir(m.Gen, i)+s.cfg.Name, string(v), clientv3.WithLease(s.lease)))
		}
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("announce holder: etcd: %w", err)
		}
		idx = idx[n:]
	}
	return nil
}

// unannounce deletes this store's holder keys of m.
func (s *Store) unannounce(ctx context.Context, m objectMeta) error {
	for start := 0; start < len(m.Shards); start += txnOps {
		ops := make([]clientv3.Op, 0, txnOps)
		for i := start; i < min(start+txnOps, len(m.Shards)); i++ {
			ops = append(ops, clientv3.OpDelete(s.holderDir(m.Gen, i)+s.cfg.Name))
		}
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("withdraw holder: etcd: %w", err)
		}
	}
	return nil
}

func (s *Store) checkArgs(name string, bufs [][]byte) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if name == "" {
		return fmt.Errorf("%w: empty object name", ErrInvalidArgument)
	}
	if len(bufs) == 0 {
		return fmt.Errorf("%w: %q: no buffers", ErrInvalidArgument, name)
	}
	for i, b := range bufs {
		if len(b) == 0 {
			return fmt.Errorf("%w: %q: buffer %d is empty", ErrInvalidArgument, name, i)
		}
	}
	return nil
}

func (s *Store) reserve(name string, h *held) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.mu.held[name]; ok {
		return fmt.Errorf("%w: %q", ErrOpened, name)
	}
	s.mu.held[name] = h
	return nil
}

func (s *Store) release(name string) {
	s.mu.Lock()
	delete(s.mu.held, name)
	s.mu.Unlock()
}

func (s *Store) markReady(name string) {
	s.mu.Lock()
	if h, ok := s.mu.held[name]; ok {
		h.ready = true
	}
	s.mu.Unlock()
}

// registerBufs registers every buffer remote-readable, read-only to
// peers (they only ever read a holder's shards, and a seeded file may be
// mapped read-only), rolling back on error.
func (s *Store) registerBufs(ctx context.Context, bufs [][]byte, location string) error {
	for i, b := range bufs {
		if err := s.eng.RegisterReadOnlyMemory(ctx, b, location); err != nil {
			s.unregisterBufs(bufs[:i])
			return fmt.Errorf("register buffer %d (%d bytes): %w", i, len(b), err)
		}
	}
	return nil
}

func (s *Store) unregisterBufs(bufs [][]byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, b := range bufs {
		_ = s.eng.UnregisterLocalMemory(ctx, memory.AddrOf(b))
	}
}

// Close stops serving everything: it revokes the lease (every holder key
// of this store disappears at once), stops the engine and closes the etcd
// clients. Object metadata this store created stays in etcd (peers may
// still hold the object). Buffers are the callers' again once Close
// returns. A second Close returns ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	return s.teardown()
}

func (s *Store) teardown() error {
	var err error
	if s.cli != nil && s.lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, rerr := s.cli.Revoke(ctx, s.lease); rerr != nil {
			err = fmt.Errorf("p2p: revoke lease: %w", rerr)
		}
		cancel()
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.kaDone != nil {
		<-s.kaDone
	}
	if s.eng != nil {
		if cerr := s.eng.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if s.cli != nil {
		_ = s.cli.Close()
	}
	if s.meta != nil {
		_ = s.meta.Close()
	}
	return err
}

// randHex returns 2n random hex digits.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
