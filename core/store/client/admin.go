package client

import (
	"context"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"

	"github.com/mooncake-go/mooncake/core/store"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// Bulk removal, sizes and operator listing. A Client has these methods; an
// Admin has them without a transfer engine, a segment or a heartbeat (for
// tools such as `mooncake ctl`). None of them grants a lease, and none is
// retried (removal is not idempotent).

// Placement is where one replica lives, or one slice of a striped replica:
// [Addr, Addr+Size) of the transfer segment named Segment.
type Placement struct {
	Segment, SegmentID string
	Addr, Size         uint64
}

// KeyInfo describes one object as the master sees it.
type KeyInfo struct {
	Key      string
	Size     uint64 // value bytes
	Owner    string // client id of the writer
	Complete bool   // readable; false while being written
	// Replicas lists, per replica, its slices in value order (one slice
	// unless the value is striped over several segments).
	Replicas         [][]Placement
	LeaseLeft        time.Duration // 0 when not leased
	SoftPin, HardPin bool          // pins the value was put with
	SoftPinLeft      time.Duration // 0 when the soft pin is not in force
	// DiskSegment is the segment whose disk tier holds a LOCAL_DISK copy
	// ("" = none); Replicas lists only the DRAM replicas.
	DiskSegment string
	ObjectID    uint64 // the value's identity at the master
}

// SegmentInfo describes one mounted segment.
type SegmentInfo struct {
	ID, Name, Protocol, HostID string
	Client                     string // client id of the owner
	Base, Size                 uint64 // address in the owner, bytes
	Used, LargestFree          uint64 // bytes allocated; largest free range
	Objects                    int    // objects with a replica or slice here
	// Kind says whether the segment outlives its owner's process
	// (store.SegmentKind, ours); embedded for a master that does not send
	// one.
	Kind store.SegmentKind
}

// UsedRatio returns the fraction of the segment in use.
func (s SegmentInfo) UsedRatio() float64 {
	if s.Size == 0 {
		return 0
	}
	return float64(s.Used) / float64(s.Size)
}

// ops are the calls shared by Client and Admin.
type ops struct {
	rpc     pb.MasterClient
	id      string
	timeout time.Duration
}

func (c *Client) ops() ops { return ops{rpc: c.rpc, id: c.id, timeout: c.cfg.RPCTimeout} }

func (o ops) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, o.timeout)
}

func keyInfo(k *pb.KeyInfo) KeyInfo {
	out := KeyInfo{
		Key: string(k.Key), Size: k.Size, Owner: k.Owner, Complete: k.Complete,
		LeaseLeft: time.Duration(k.LeaseMsLeft) * time.Millisecond, SoftPin: k.SoftPin, HardPin: k.HardPin,
		SoftPinLeft: time.Duration(k.SoftPinMsLeft) * time.Millisecond,
	}
	out.ObjectID = k.ObjectId
	for _, r := range k.Replicas {
		if r.Type == 1 { // LOCAL_DISK
			out.DiskSegment = r.SegmentId
			continue
		}
		var ps []Placement
		if len(r.Slices) == 0 {
			ps = []Placement{{Segment: r.Segment, SegmentID: r.SegmentId, Addr: r.Addr, Size: r.Size}}
		}
		for _, s := range r.Slices {
			ps = append(ps, Placement{Segment: s.Segment, SegmentID: s.SegmentId, Addr: s.Addr, Size: s.Size})
		}
		out.Replicas = append(out.Replicas, ps)
	}
	return out
}

func segmentInfo(g *pb.SegmentInfo) SegmentInfo {
	s := g.GetSegment()
	return SegmentInfo{
		ID: s.GetId(), Name: s.GetName(), Protocol: s.GetProtocol(), HostID: s.GetHostId(), Client: g.ClientId,
		Base: s.GetBase(), Size: s.GetSize(), Used: g.Used, LargestFree: g.LargestFree, Objects: int(g.Objects),
		Kind: store.SegmentKind(s.GetKind()),
	}
}

// RemoveByRegex removes the objects whose key matches expr (RE2,
// unanchored) and returns how many. Objects being written are skipped, and
// leased or hard-pinned ones unless force. Keys that are not UTF-8 are
// matched as master.RemoveByRegex says (each stray byte as U+FFFD).
// Errors: INVALID_PARAMS (bad expression, or one that is not UTF-8),
// RPC_FAIL. Mirrors upstream remove_by_regex.
func (o ops) RemoveByRegex(ctx context.Context, expr string, force bool) (int, error) {
	r, err := o.RemoveByRegexReport(ctx, expr, force)
	return r.Removed, err
}

// RegexRemoval is what RemoveByRegexReport did with the objects whose key
// matched: how many it removed and, of those it left, why (ours: upstream
// reports the count removed only). A master that predates the report
// sends zeros for the skipped counts.
type RegexRemoval struct {
	Removed int
	Leased  int // left because leased or hard-pinned; force removes them
	Busy    int // left because a disk tier copy is in progress; force removes them
	Writing int // left because being written; nothing removes them
}

// RemoveByRegexReport is RemoveByRegex, saying also how many matching
// objects it left and why. Errors as RemoveByRegex.
func (o ops) RemoveByRegexReport(ctx context.Context, expr string, force bool) (RegexRemoval, error) {
	if !utf8.ValidString(expr) {
		// The expression is a proto string field: refuse it here with the
		// reason rather than as a failed RPC.
		return RegexRemoval{}, store.Errorf(store.InvalidParams, "regex %q is not UTF-8; match a byte that is not UTF-8 with . or \\x{FFFD}", expr)
	}
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	r, err := o.rpc.RemoveByRegex(ctx, &pb.RemoveByRegexRequest{ClientId: o.id, Regex: expr, Force: force})
	if err != nil {
		return RegexRemoval{}, rpcErr("remove by regex", err)
	}
	return RegexRemoval{Removed: int(r.Count), Leased: int(r.SkippedLeased), Busy: int(r.SkippedBusy), Writing: int(r.SkippedWriting)}, statusErr(r.Status)
}

// RemoveAll removes every complete object, leased ones only with force
// (hard pins do not protect; writes in progress always stay), and returns
// how many. Errors: RPC_FAIL. Mirrors upstream remove_all.
func (o ops) RemoveAll(ctx context.Context, force bool) (int, error) {
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	r, err := o.rpc.RemoveAll(ctx, &pb.RemoveAllRequest{ClientId: o.id, Force: force})
	if err != nil {
		return 0, rpcErr("remove all", err)
	}
	return int(r.Count), statusErr(r.Status)
}

// BatchRemove removes each key and returns one error per key (nil =
// removed): OBJECT_NOT_FOUND, OBJECT_HAS_LEASE (leased or hard-pinned, and
// not force), REPLICA_IS_NOT_READY, INVALID_PARAMS / INVALID_KEY, or
// RPC_FAIL for all. Mirrors upstream batch_remove.
func (o ops) BatchRemove(ctx context.Context, keys []string, force bool) []error {
	errs := make([]error, len(keys))
	if len(keys) == 0 {
		return errs
	}
	results, err := chunked(keys, "batch remove", func(lo, hi int) ([]*pb.Status, error) {
		rctx, cancel := o.ctx(ctx)
		defer cancel()
		r, err := o.rpc.BatchRemove(rctx, &pb.KeysRequest{ClientId: o.id, Keys: pb.Keys(keys[lo:hi]), Force: force})
		if err != nil {
			return nil, rpcErr("batch remove", err)
		}
		return r.Results, nil
	})
	for i, s := range results {
		errs[i] = statusErr(s)
	}
	if err != nil {
		fill(errs[len(results):], err)
	}
	return errs
}

// Remove deletes key. See BatchRemove.
func (o ops) Remove(ctx context.Context, key string, force bool) error {
	return o.BatchRemove(ctx, []string{key}, force)[0]
}

// BatchGetSize returns each key's value size, or an error per key:
// OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY, INVALID_PARAMS / INVALID_KEY,
// RPC_FAIL. No lease is granted. Mirrors upstream get_size.
func (o ops) BatchGetSize(ctx context.Context, keys []string) ([]uint64, []error) {
	infos, errs := o.batchStat(ctx, keys)
	sizes := make([]uint64, len(keys))
	for i, in := range infos {
		sizes[i] = in.Size
	}
	return sizes, errs
}

// GetSize returns key's value size. See BatchGetSize.
func (o ops) GetSize(ctx context.Context, key string) (uint64, error) {
	n, errs := o.BatchGetSize(ctx, []string{key})
	return n[0], errs[0]
}

// Stat describes a readable key: its size, replicas and pins (errors as
// GetSize). The placements are for inspection only: without a lease, the
// bytes may be evicted at any time.
func (o ops) Stat(ctx context.Context, key string) (KeyInfo, error) {
	in, errs := o.batchStat(ctx, []string{key})
	return in[0], errs[0]
}

func (o ops) batchStat(ctx context.Context, keys []string) ([]KeyInfo, []error) {
	infos := make([]KeyInfo, len(keys))
	errs := make([]error, len(keys))
	if len(keys) == 0 {
		return infos, errs
	}
	results, err := chunked(keys, "get size", func(lo, hi int) ([]*pb.GetSizeResult, error) {
		rctx, cancel := o.ctx(ctx)
		defer cancel()
		r, err := o.rpc.BatchGetSize(rctx, &pb.KeysRequest{ClientId: o.id, Keys: pb.Keys(keys[lo:hi])})
		if err != nil {
			return nil, rpcErr("get size", err)
		}
		return r.Results, nil
	})
	if err != nil {
		fill(errs[len(results):], err)
	}
	for i, x := range results {
		if errs[i] = statusErr(x.Status); errs[i] != nil {
			continue
		}
		if x.Info != nil {
			infos[i] = keyInfo(x.Info)
		}
		infos[i].Key, infos[i].Size = keys[i], x.Size
	}
	return infos, errs
}

// ListSegments describes every mounted segment, in ID order. Errors:
// RPC_FAIL.
func (o ops) ListSegments(ctx context.Context) ([]SegmentInfo, error) {
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	r, err := o.rpc.ListSegments(ctx, &pb.ListSegmentsRequest{})
	if err != nil {
		return nil, rpcErr("list segments", err)
	}
	out := make([]SegmentInfo, len(r.Segments))
	for i, g := range r.Segments {
		out[i] = segmentInfo(g)
	}
	return out, nil
}

// QuerySegment describes one segment. Errors: INVALID_PARAMS (empty id),
// SEGMENT_NOT_FOUND, RPC_FAIL.
func (o ops) QuerySegment(ctx context.Context, id string) (SegmentInfo, error) {
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	r, err := o.rpc.QuerySegment(ctx, &pb.QuerySegmentRequest{SegmentId: id})
	if err != nil {
		return SegmentInfo{}, rpcErr("query segment", err)
	}
	if err := statusErr(r.Status); err != nil {
		return SegmentInfo{}, err
	}
	return segmentInfo(r.Segment), nil
}

// ListKeys describes the objects whose key starts with prefix, in key
// order, at most limit (0 = all; mind gRPC's 4 MiB message limit on a big
// pool), and returns how many match in all. Errors: INVALID_PARAMS
// (negative limit), RPC_FAIL.
func (o ops) ListKeys(ctx context.Context, prefix string, limit int) ([]KeyInfo, int, error) {
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	r, err := o.rpc.ListKeys(ctx, &pb.ListKeysRequest{Prefix: []byte(prefix), Limit: int64(limit)})
	if err != nil {
		return nil, 0, rpcErr("list keys", err)
	}
	if err := statusErr(r.Status); err != nil {
		return nil, 0, err
	}
	out := make([]KeyInfo, len(r.Keys))
	for i, k := range r.Keys {
		out[i] = keyInfo(k)
	}
	return out, int(r.Total), nil
}

// Stats returns the master's usage snapshot. Errors: RPC_FAIL.
func (o ops) Stats(ctx context.Context) (*pb.StatsResponse, error) {
	ctx, cancel := o.ctx(ctx)
	defer cancel()
	r, err := o.rpc.GetStats(ctx, &pb.StatsRequest{})
	if err != nil {
		return nil, rpcErr("get stats", err)
	}
	return r, nil
}

// RemoveByRegex: see Admin.RemoveByRegex.
func (c *Client) RemoveByRegex(ctx context.Context, expr string, force bool) (int, error) {
	return c.ops().RemoveByRegex(ctx, expr, force)
}

// RemoveByRegexReport: see Admin.RemoveByRegexReport.
func (c *Client) RemoveByRegexReport(ctx context.Context, expr string, force bool) (RegexRemoval, error) {
	return c.ops().RemoveByRegexReport(ctx, expr, force)
}

// RemoveAll: see Admin.RemoveAll.
func (c *Client) RemoveAll(ctx context.Context, force bool) (int, error) {
	return c.ops().RemoveAll(ctx, force)
}

// BatchRemove: see Admin.BatchRemove.
func (c *Client) BatchRemove(ctx context.Context, keys []string, force bool) []error {
	return c.ops().BatchRemove(ctx, keys, force)
}

// GetSize: see Admin.GetSize.
func (c *Client) GetSize(ctx context.Context, key string) (uint64, error) {
	return c.ops().GetSize(ctx, key)
}

// BatchGetSize: see Admin.BatchGetSize.
func (c *Client) BatchGetSize(ctx context.Context, keys []string) ([]uint64, []error) {
	return c.ops().BatchGetSize(ctx, keys)
}

// Stat: see Admin.Stat.
func (c *Client) Stat(ctx context.Context, key string) (KeyInfo, error) {
	return c.ops().Stat(ctx, key)
}

// ListSegments: see Admin.ListSegments.
func (c *Client) ListSegments(ctx context.Context) ([]SegmentInfo, error) {
	return c.ops().ListSegments(ctx)
}

// QuerySegment: see Admin.QuerySegment.
func (c *Client) QuerySegment(ctx context.Context, id string) (SegmentInfo, error) {
	return c.ops().QuerySegment(ctx, id)
}

// ListKeys: see Admin.ListKeys.
func (c *Client) ListKeys(ctx context.Context, prefix string, limit int) ([]KeyInfo, int, error) {
	return c.ops().ListKeys(ctx, prefix, limit)
}

// Admin is a master-only connection for operators: the methods above
// without a transfer engine, a segment or a heartbeat. Safe for concurrent
// use; Close releases the connection.
type Admin struct {
	ops
	conn *grpc.ClientConn
	stop chan struct{} // closed by Close: ends retries across a failover
	once sync.Once     // guards close(stop)
}

// AdminOption is an optional DialAdmin setting.
type AdminOption func(*adminConfig)

type adminConfig = dialConfig

// WithClusterID sets the HA cluster an etcd:// address follows (as
// Config.ClusterID; default "mooncake_cluster").
func WithClusterID(id string) AdminOption { return func(c *adminConfig) { c.cluster = id } }

// WithTLS dials the master with mutual TLS (as Config.TLS); nil =
// plaintext.
func WithTLS(tc *tlsconfig.Config) AdminOption { return func(c *adminConfig) { c.tls = tc } }

// WithEtcdTLS is the TLS identity of the etcd client that follows the
// leader of an etcd:// address (as Config.EtcdTLS); nil = plaintext.
func WithEtcdTLS(tc *tlsconfig.Config) AdminOption { return func(c *adminConfig) { c.etcdTLS = tc } }

// DialAdmin connects to the master at addr: host:port, or
// "etcd://h1:2379,h2:2379" to follow the leader of highly available
// masters as a Client does (leader.go; listings and statistics are retried
// across a failover, removals are not). Each call is bounded by timeout
// (default 30 s). The connection is made lazily, so an unreachable master
// shows as RPC_FAIL on the first call (Unreachable tells it apart).
// Errors: INVALID_PARAMS (empty address, an etcd:// address with no
// endpoint, a bad cluster id), RPC_FAIL (unusable address).
func DialAdmin(addr string, timeout time.Duration, opts ...AdminOption) (*Admin, error) {
	if addr == "" {
		return nil, store.Errorf(store.InvalidParams, "no master address")
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	var cfg adminConfig
	for _, o := range opts {
		o(&cfg)
	}
	stop := make(chan struct{})
	conn, err := dial(addr, cfg, stop)
	if err != nil {
		return nil, err
	}
	return &Admin{ops: ops{rpc: pb.NewMasterClient(conn), id: "admin/" + randomID(), timeout: timeout}, conn: conn, stop: stop}, nil
}

// Close closes the connection; a second Close returns gRPC's error.
func (a *Admin) Close() error {
	a.once.Do(func() { close(a.stop) })
	return a.conn.Close()
}
