package master

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/mooncake-go/mooncake/core/alloc"
	"github.com/mooncake-go/mooncake/core/store"
)

// MaxKeyLen is the longest key accepted, in bytes (store.MaxKeyLen).
const MaxKeyLen = store.MaxKeyLen

// AllocAlign is the alignment of every replica's (and stripe piece's)
// start address in its segment, in bytes: a segment holds at most size /
// (value rounded up to AllocAlign) contiguous values of one size at once.
const AllocAlign = 64

// Config configures a Master. Zero values take upstream's defaults.
type Config struct {
	// DefaultLeaseTTL is the lease granted by every read; default 10 s
	// (upstream --default_kv_lease_ttl=10000 ms).
	DefaultLeaseTTL time.Duration
	// EvictionRatio is the fraction of capacity freed by one eviction pass;
	// default 0.05 (upstream --eviction_ratio). Must be in (0,1].
	EvictionRatio float64
	// EvictionHighWatermark is the usage fraction above which Tick evicts;
	// default 0.90 (upstream --eviction_high_watermark_ratio). 1.0 disables
	// proactive eviction (allocation failures still evict).
	EvictionHighWatermark float64
	// EvictionPolicy names the eviction order (evict.go): "lru" (the
	// default, upstream's) or "s3fifo". Ours: upstream has only LRU.
	EvictionPolicy string
	// PutStartDiscardTimeout is the age after which an unfinished PutStart
	// may be taken over by a new PutStart of the same key; default 30 s.
	PutStartDiscardTimeout time.Duration
	// PutStartReleaseTimeout is how long a taken-over write's space stays
	// reserved (its writer may still be writing) before it is freed; default
	// 600 s.
	PutStartReleaseTimeout time.Duration
	// ReservationTTL is the age after which Tick takes over an unused
	// reservation (Reserve) like a stale write; default 30 s. Ours.
	ReservationTTL time.Duration
	// ClientTTL is how long a client stays alive without a Ping; when it
	// passes, Tick unmounts the client's segments; default 10 s (upstream
	// --client_ttl).
	ClientTTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Rand drives placement; default a fixed-seed PCG (deterministic, for
	// tests). `mooncake master` passes a randomly seeded one.
	Rand *rand.Rand
	// Observer, when set, is told of every committed mutation,
	// synchronously and in order (replication.go); default none.
	Observer Observer
	// AllocationStrategy orders the segments tried for new replicas
	// (upstream --allocation_strategy): StrategyRandom (default),
	// StrategyFreeRatioFirst or StrategyLocalFirst; see placement.go.
	AllocationStrategy string
	// DefaultSoftPinTTL is how long a soft pin protects an object after it
	// becomes readable and after each lease grant (0.3.x semantics);
	// default 30 min (upstream --default_kv_soft_pin_ttl).
	DefaultSoftPinTTL time.Duration
	// NoEvictSoftPinned keeps soft-pinned objects even when nothing else
	// can be evicted (upstream --allow_evict_soft_pinned_objects=false). By
	// default they are evicted in a second pass, as upstream.
	NoEvictSoftPinned bool
	// EnableOffload lets owners attach disk tiers to their segments
	// (MountLocalDisk) and moves objects to them (upstream
	// --enable_offload, default false); see tier.go. Without
	// OffloadOnEvict every committed object whose DRAM replica lies on a
	// segment with a disk tier is offloaded at once (write-through) and
	// keeps its DRAM replica until evicted.
	EnableOffload bool
	// OffloadOnEvict offloads an object when eviction picks it, instead of
	// dropping it, and frees its DRAM once the copy is on disk (upstream
	// --offload_on_evict, default false). Requires EnableOffload.
	OffloadOnEvict bool
	// TierTaskTimeout is how long a disk tier owner has to report a task
	// it took before the master abandons it; default 30 s.
	TierTaskTimeout time.Duration
}

func (c *Config) defaults() {
	if c.DefaultLeaseTTL <= 0 {
		c.DefaultLeaseTTL = 10 * time.Second
	}
	if c.EvictionRatio <= 0 {
		c.EvictionRatio = 0.05
	}
	if c.EvictionHighWatermark <= 0 {
		c.EvictionHighWatermark = 0.90
	}
	if c.PutStartDiscardTimeout <= 0 {
		c.PutStartDiscardTimeout = 30 * time.Second
	}
	if c.ReservationTTL <= 0 {
		c.ReservationTTL = 30 * time.Second
	}
	if c.PutStartReleaseTimeout <= 0 {
		c.PutStartReleaseTimeout = 600 * time.Second
	}
	if c.ClientTTL <= 0 {
		c.ClientTTL = 10 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.New(rand.NewPCG(1, 2))
	}
	if c.AllocationStrategy == "" {
		c.AllocationStrategy = StrategyRandom
	}
	if c.DefaultSoftPinTTL <= 0 {
		c.DefaultSoftPinTTL = 30 * time.Minute
	}
	if c.TierTaskTimeout <= 0 {
		c.TierTaskTimeout = 30 * time.Second
	}
}

// Validate reports an out-of-range setting: INVALID_PARAMS naming it.
func (c *Config) Validate() error {
	if err := checkPolicy(c.EvictionPolicy); err != nil {
		return err
	}
	if c.OffloadOnEvict && !c.EnableOffload {
		return store.Errorf(store.InvalidParams, "offload_on_evict needs enable_offload")
	}
	if c.EvictionRatio < 0 || c.EvictionRatio > 1 {
		return store.Errorf(store.InvalidParams, "eviction_ratio %v not in [0,1]", c.EvictionRatio)
	}
	if c.EvictionHighWatermark < 0 || c.EvictionHighWatermark > 1 {
		return store.Errorf(store.InvalidParams, "eviction_high_watermark_ratio %v not in [0,1]", c.EvictionHighWatermark)
	}
	return checkStrategy(c.AllocationStrategy)
}

// Segment is a range of memory a client mounted into the pool.
type Segment struct {
	ID       string // unique id chosen by the client (upstream: UUID)
	Name     string // the client's transfer-engine segment name (transport endpoint)
	Base     uint64 // virtual address of the first byte in the owner's process
	Size     uint64 // bytes
	Protocol string // "tcp", ...
	HostID   string // the owner's host (upstream host_id) for local_first; "" = host part of Name
	// Kind says whether the segment outlives its client's process:
	// placement fills store.SegmentStandalone segments before
	// store.SegmentEmbedded ones (the zero value; placement.go). Ours:
	// upstream has no such field.
	Kind store.SegmentKind
}

// ReplicaConfig is the per-put replication request (upstream ReplicateConfig).
type ReplicaConfig struct {
	// ReplicaNum is the number of memory replicas wanted, each on a distinct
	// segment; best effort: fewer are made when space is short. Must be > 0.
	ReplicaNum int
	// PreferredSegment is a segment name tried first (upstream preferred_segment).
	PreferredSegment string
	// PreferredSegments are segment names tried first, in order, before
	// PreferredSegment (upstream preferred_segments).
	PreferredSegments []string
	// HostID is the writer's host, used by the local_first strategy
	// (upstream host_id, filled by the client); "" = host part of
	// PreferredSegment.
	HostID string
	// WithSoftPin soft-pins the object (upstream 0.3.x with_soft_pin): it
	// is evicted only when nothing else can be, for DefaultSoftPinTTL after
	// it becomes readable and after each read.
	WithSoftPin bool
	// WithHardPin hard-pins the object (upstream with_hard_pin): never
	// evicted; removed only by Remove with force or RemoveAll.
	WithHardPin bool
}

// ReplicaStatus mirrors upstream's replica status.
type ReplicaStatus int

const (
	ReplicaProcessing ReplicaStatus = 2 // being written
	ReplicaComplete   ReplicaStatus = 3 // readable
)

// Replica describes one copy of a value: read or write [Addr, Addr+Size) of
// the transfer segment named Segment (upstream memory descriptor:
// buffer_address, size, transport_endpoint). A striped replica (a value
// larger than any one segment can hold) has Slices instead: the value's
// consecutive pieces, each on its own segment; Segment, SegmentID and Addr
// are then empty and Size is the whole value. Pieces returns either form as
// slices. A ReplicaLocalDisk replica (operator views only: readers are
// given DRAM replicas) is a file on the disk tier of segment SegmentID;
// Addr is 0.
type Replica struct {
	Segment   string // transport endpoint: the owner's transfer segment name
	SegmentID string
	Addr      uint64
	Size      uint64
	Status    ReplicaStatus
	Slices    []Slice     // nil unless striped
	Type      ReplicaType // ReplicaMemory unless on a disk tier
}

type segment struct {
	Segment
	client string
	alloc  *alloc.Allocator
	nobj   int // objects with a replica (or a piece, or a load's staging range) here
	// objects are those nobj objects while a disk tier is attached
	// (StagingRetry reads them), else nil (see object.go).
	objects *objSet
	disk    *diskTier // attached disk tier, or nil
}

// track and untrack count o in or out of s (o gains or loses its one
// range on s).
func (s *segment) track(o *object) {
	s.nobj++
	if s.objects != nil {
		s.objects.add(o)
	}
}

func (s *segment) untrack(o *object) {
	s.nobj--
	if s.objects != nil {
		s.objects.del(o)
	}
}

type replica struct {
	seg    *segment
	offset uint64
	stripe []piece // nil: contiguous [offset, offset+size) on seg; else every piece, stripe[0] at seg/offset
}

// clientState is what the master knows of a live client (see Ping).
type clientState struct {
	deadline time.Time // ClientTTL after its last call; Tick expires it past this
	// mounted: the client mounted or remounted since the master learnt of
	// it, so its segments are known. A client known only from its Pings
	// is told to remount.
	mounted bool
}

// discarded is space of an abandoned write (or load) held until release,
// since its writer may still be writing into it.
type discarded struct {
	pieces  []piece
	release time.Time
}

// Stats is a snapshot of the pool's usage.
type Stats struct {
	Capacity uint64 // bytes over all mounted segments
	// Used is the bytes allocated to objects (replicas and discarded
	// writes), not counting Reserved.
	Used    uint64
	Objects int // keys in the table (complete or being written)
	// Reserved is the bytes held by Reservations reservations (Reserve)
	// not committed yet: allocated, so not free, but no object's.
	Reserved       uint64
	Reservations   int
	Segments       int
	Clients        int
	EvictedObjects uint64 // total evicted since start
	EvictedBytes   uint64
	EvictionRuns   uint64
	AllocFailures  uint64 // PutStart calls that found no space even after eviction
	SegmentsDetail []SegmentStats
	DiscardedBytes uint64 // space of taken-over writes not yet released
	SoftPinned     int    // objects put WithSoftPin
	HardPinned     int    // objects put WithHardPin
	PartialPuts    uint64 // PutStart calls that made fewer replicas than asked
	StripedPuts    uint64 // PutStart calls that striped a replica over segments

	// Disk tiers (tier.go). DiskCapacity is the registered capacity of
	// every tier, DiskUsed the value bytes of LOCAL_DISK replicas (the
	// owners' files also hold headers), DiskObjects the objects with one.
	DiskCapacity, DiskUsed uint64
	DiskObjects            int
	Offloads               uint64 // offloads that succeeded (LOCAL_DISK replicas added)
	OffloadFailures        uint64 // offloads the owner reported failed
	DiskHits               uint64 // loads from disk that succeeded (reads served from disk)
	DiskMisses             uint64 // loads that failed (corrupt or missing file, or the tier left with its node): objects dropped
	DiskEvictions          uint64 // LOCAL_DISK replicas dropped because the owner evicted the file
	TierTaskTimeouts       uint64 // tasks abandoned past their deadline
	PendingOffloadBytes    uint64 // DRAM to be freed by offloads queued by eviction
}

// SegmentStats is one segment's usage.
type SegmentStats struct {
	ID, Name       string
	Capacity, Used uint64 // Used: objects' bytes here, not counting Reserved
	Objects        int    // objects with a replica (or piece) here
	// Reserved is the bytes of Reservations reservations with a range
	// here (see Stats.Reserved).
	Reserved     uint64
	Reservations int
	// DiskCapacity and DiskUsed (bytes) and DiskObjects describe the
	// segment's disk tier; zero without one.
	DiskCapacity, DiskUsed uint64
	DiskObjects            int
}

// Master is the pool's metadata service. See the package doc.
type Master struct {
	cfg      Config
	segs     map[string]*segment // by ID
	order    []*segment          // placement order, sorted by ID
	objects  *objTable
	owners   owners    // writers of the objects in the table
	epoch    time.Time // origin of the objects' time stamps (Master.stamp)
	pol      evictor   // eviction order of the complete DRAM objects
	clients  map[string]clientState
	discards []discarded
	capacity uint64
	used     uint64
	stats    Stats
	pinned   struct{ soft, hard int } // objects in the table with each pin

	// standalone and embedded split order by Segment.Kind, each sorted by
	// ID: placement tries standalone segments first.
	standalone, embedded []*segment

	nextID       uint64                 // next object id
	tierSeq      uint64                 // see TierSeq
	spaceSeq     uint64                 // see SpaceSeq
	sealSeq      uint64                 // see SealSeq
	precommits   int                    // objects in the table with bitPrecommit
	pendingFree  uint64                 // DRAM bytes offloads queued by eviction will free
	inflight     map[*tierTask]struct{} // taken tier tasks
	diskCapacity uint64                 // bytes over all disk tiers

	resv      map[uint64]reservation // by object id (reserve.go)
	resvCount map[string]int         // reservations per client
	resvSalt  uint64                 // Reservation.ID = object id ^ resvSalt, random per master (reserve.go)
	resvBytes uint64                 // bytes of all reservations' replicas (in used)
}

// New returns an empty master. Errors: INVALID_PARAMS from Config.Validate.
func New(cfg Config) (*Master, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	m := &Master{cfg: cfg, segs: map[string]*segment{}, objects: newObjTable(), clients: map[string]clientState{},
		nextID: 1, inflight: map[*tierTask]struct{}{}, epoch: cfg.Now(), resvSalt: rand.Uint64()}
	if cfg.EvictionPolicy == PolicyS3FIFO {
		m.pol = newS3FIFO(m)
	} else {
		l := &lruPolicy{}
		l.r.init()
		m.pol = l
	}
	return m, nil
}

// Config returns the effective configuration (defaults filled in).
func (m *Master) Config() Config { return m.cfg }

// EndBatch ends a batch call: the keys of the calls since the last
// EndBatch were one batch (one request's blocks in prefix order), which
// prefix-aware eviction policies use to break ties (see PolicyS3FIFO).
// The server calls it whenever it releases the master.
func (m *Master) EndBatch() { m.pol.endBatch() }

// checkKey is store.CheckKey: keys are any 1..MaxKeyLen bytes.
func checkKey(key string) error { return store.CheckKey(key) }

// Client liveness. Only Ping and the mounts (MountSegment, ReMountSegment)
// create a client: Ping one that still has to remount, a mount one whose
// segments are known. Every other call from a known client refreshes its
// ClientTTL; a call from a client the master does not know (a restarted
// master, or one whose TTL passed) is served as usual (upstream does the
// same: it checks no client on puts) but registers nothing, so the
// client's next Ping still asks it to remount.

// mountedClient records that client mounted (or remounted): it is alive
// for ClientTTL and its segments are known.
func (m *Master) mountedClient(client string) {
	if client != "" {
		m.clients[client] = clientState{deadline: m.cfg.Now().Add(m.cfg.ClientTTL), mounted: true}
	}
}

// touchClient refreshes the ClientTTL of a known client; it creates none.
func (m *Master) touchClient(client string) {
	if c, ok := m.clients[client]; ok {
		c.deadline = m.cfg.Now().Add(m.cfg.ClientTTL)
		m.clients[client] = c
	}
}

// MountSegment adds seg, owned by client, to the pool. Errors:
// INVALID_PARAMS (empty id or name, zero size, base 0, undefined kind);
// SEGMENT_ALREADY_EXISTS (id already mounted). Mirrors upstream
// MountSegment; seg.Kind is ours.
func (m *Master) MountSegment(seg Segment, client string) error {
	if err := checkSegment(seg); err != nil {
		return err
	}
	if _, ok := m.segs[seg.ID]; ok {
		return store.Errorf(store.SegmentAlreadyExists, "segment %q", seg.ID)
	}
	a, err := alloc.New(seg.Size, alloc.Untracked()) // every range's size is kept here
	if err != nil {
		return store.Errorf(store.InvalidParams, "segment %q: %v", seg.ID, err)
	}
	s := &segment{Segment: seg, client: client, alloc: a}
	m.segs[seg.ID] = s
	m.order = insertByID(m.order, s)
	if seg.Kind == store.SegmentStandalone {
		m.standalone = insertByID(m.standalone, s)
	} else {
		m.embedded = insertByID(m.embedded, s)
	}
	m.capacity += seg.Size
	m.mountedClient(client)
	m.observeMounted(s)
	return nil
}

// insertByID inserts s into segs, which is sorted by ID, and returns it.
func insertByID(segs []*segment, s *segment) []*segment {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].ID >= s.ID })
	segs = append(segs, nil)
	copy(segs[i+1:], segs[i:])
	segs[i] = s
	return segs
}

// removeSeg removes s from segs, if there, and returns it.
func removeSeg(segs []*segment, s *segment) []*segment {
	for i, x := range segs {
		if x == s {
			return append(segs[:i], segs[i+1:]...)
		}
	}
	return segs
}

// UnmountSegment removes a segment; every replica on it is dropped at once,
// with its disk tier and the LOCAL_DISK replicas there, and objects left
// without replicas disappear (an unfinished write of such an object then
// fails at PutEnd with OBJECT_NOT_FOUND). Errors:
// SEGMENT_NOT_FOUND. Mirrors upstream UnmountSegment.
func (m *Master) UnmountSegment(id, client string) error {
	s, ok := m.segs[id]
	if !ok {
		return store.Errorf(store.SegmentNotFound, "segment %q", id)
	}
	for _, o := range m.objectsOn(s) {
		m.dropReplicasOn(o, s)
	}
	m.dropReservationsOn(s)
	m.dropTier(s, s)
	// Discarded ranges on this segment vanish with it.
	for i := range m.discards {
		kept := m.discards[i].pieces[:0]
		for _, p := range m.discards[i].pieces {
			if p.seg != s {
				kept = append(kept, p)
			} else {
				m.stats.DiscardedBytes -= p.size
				m.used -= p.size
			}
		}
		m.discards[i].pieces = kept
	}
	delete(m.segs, id)
	m.order = removeSeg(m.order, s)
	m.standalone = removeSeg(m.standalone, s)
	m.embedded = removeSeg(m.embedded, s)
	m.capacity -= s.Size
	m.observeUnmounted(id)
	return nil
}

// Ping records that client is alive and reports whether it must remount:
// needRemount is true until the client mounts or remounts (MountSegment,
// or ReMountSegment, with no segments for a client that has none) after
// the master learnt of it: on first contact, after a master restart, and
// after its TTL passed and its segments were unmounted. A client that
// does not remount keeps being asked. Mirrors upstream Ping's
// ClientStatus OK / NEED_REMOUNT (upstream's ok_client_ set is filled by
// the mounts).
func (m *Master) Ping(client string) (needRemount bool, err error) {
	if client == "" {
		return false, store.Errorf(store.InvalidParams, "empty client id")
	}
	c := m.clients[client]
	c.deadline = m.cfg.Now().Add(m.cfg.ClientTTL)
	m.clients[client] = c
	return !c.mounted, nil
}

// objectsOn returns the objects with a range on s: a replica, a piece of
// one, or a load's staging range. Without a disk tier s keeps no set of
// them and the whole table is scanned (upstream's unmount scans every
// object too).
func (m *Master) objectsOn(s *segment) []*object {
	out := make([]*object, 0, s.nobj)
	if s.objects != nil {
		for o := range s.objects.all {
			out = append(out, o)
		}
		return out
	}
	if s.nobj == 0 {
		return out
	}
	for o := range m.objects.all {
		if m.onSegment(o, s) {
			out = append(out, o)
		}
	}
	return out
}

// onSegment reports whether o has a range on s (see objectsOn).
func (m *Master) onSegment(o *object, s *segment) bool {
	if o.seg == s {
		return true
	}
	var one [1]replica
	for _, r := range o.replicas(&one) {
		if r.on(s) {
			return true
		}
	}
	t := o.task()
	return t != nil && t.kind == TaskLoad && t.staging.seg == s
}

func (m *Master) free(o *object) {
	m.observeRemoved(o)
	m.freeReplicas(o, nil)
	m.forget(o)
}

func (m *Master) descs(o *object) []Replica {
	st := ReplicaProcessing
	if o.complete {
		st = ReplicaComplete
	}
	var one [1]replica
	rs := o.replicas(&one)
	out := make([]Replica, len(rs))
	for i, r := range rs {
		out[i] = describe(o, r, st)
	}
	return out
}

// PutStart reserves space for key's value of size bytes: up to
// cfg.ReplicaNum replicas on distinct segments, chosen by
// Config.AllocationStrategy, returned in PROCESSING state for the caller to
// write. A value no one segment can hold is striped (see Replica.Slices).
// When space is short it evicts (least recently used, unleased, complete
// objects; soft-pinned ones last, hard-pinned never) and retries, and
// returns fewer replicas than asked if that is all that fits (counted in
// Stats.PartialPuts). Errors: INVALID_PARAMS (empty key, size 0,
// ReplicaNum <= 0); INVALID_KEY (key too long); OBJECT_ALREADY_EXISTS
// (complete, or being written for less than PutStartDiscardTimeout);
// NO_AVAILABLE_HANDLE (nothing fits even after eviction, or no segments).
// A client the master does not know may put (see Client liveness above):
// the put is served, and the client stays unknown. Mirrors upstream
// PutStart, except that upstream evicts asynchronously and fails this
// call.
func (m *Master) PutStart(client, key string, size uint64, cfg ReplicaConfig) ([]Replica, error) {
	reps, _, _, err := m.TryPutStart(client, key, size, cfg, time.Time{})
	return reps, err
}

// TryPutStart is PutStart for a caller that can wait until the moment
// until (zero: it cannot). When nothing fits but room will come by then,
// it returns wait = true with NO_AVAILABLE_HANDLE, not counted in
// Stats.AllocFailures: while offloads queued by eviction
// (Config.OffloadOnEvict, or write-through copies not finished yet) will
// free DRAM, or when a lease ends no later than until (retryAt is then
// the first lease end; zero when only offloads are awaited). The caller
// waits for TierSeq or SpaceSeq to change, or for retryAt, and tries
// again; its last try passes a zero until.
func (m *Master) TryPutStart(client, key string, size uint64, cfg ReplicaConfig, until time.Time) (reps []Replica, retryAt time.Time, wait bool, err error) {
	return m.putStart(client, key, size, cfg, until)
}

// leaseEndScan bounds the walk of nextLeaseEnd.
const leaseEndScan = 4096

// nextLeaseEnd returns when the first lease of a complete DRAM object that
// eviction could then take ends. Leases are granted for DefaultLeaseTTL
// and every grant makes its object the most recently used, so the least
// recently used leased object holds the first lease to end: the walk
// stops there (or after leaseEndScan objects, reporting none).
func (m *Master) nextLeaseEnd(now time.Time) (time.Time, bool) {
	n := 0
	first, found := int64(math.MaxInt64), false
	for o := range m.pol.order {
		if n++; n > leaseEndScan {
			break
		}
		if o.hardPin || !m.leased(o, now) {
			continue
		}
		first, found = min(first, o.leaseUntil), true
		if _, lru := m.pol.(*lruPolicy); lru {
			break // the least recently used leased object holds the first lease to end
		}
	}
	if !found {
		return time.Time{}, false
	}
	return m.timeOf(first), true
}

func (m *Master) putStart(client, key string, size uint64, cfg ReplicaConfig, until time.Time) ([]Replica, time.Time, bool, error) {
	if err := checkKey(key); err != nil {
		return nil, time.Time{}, false, err
	}
	if size == 0 {
		return nil, time.Time{}, false, store.Errorf(store.InvalidParams, "key %q: value size 0", key)
	}
	if cfg.ReplicaNum <= 0 {
		return nil, time.Time{}, false, store.Errorf(store.InvalidParams, "key %q: replica_num %d", key, cfg.ReplicaNum)
	}
	m.touchClient(client)
	now := m.cfg.Now()
	m.releaseDiscards(now)
	if o := m.objects.get(key); o != nil {
		if o.complete || time.Duration(m.stamp(now)-o.when) < m.cfg.PutStartDiscardTimeout {
			return nil, time.Time{}, false, store.Errorf(store.ObjectAlreadyExists, "key %q", key)
		}
		// Take over a stale write: its writer may still be writing, so its
		// space is only released after PutStartReleaseTimeout.
		m.discard(o, now)
	}
	if size > m.capacity {
		return nil, time.Time{}, false, store.Errorf(store.NoAvailableHandle, "key %q: %d bytes exceed pool capacity %d", key, size, m.capacity)
	}
	o := &object{key: key, size: size, when: m.stamp(now), leaseUntil: noStamp, softPin: cfg.WithSoftPin, hardPin: cfg.WithHardPin, id: m.nextID}
	m.nextID++
	m.allocate(o, cfg, now)
	if o.nreps() == 0 {
		var err error
		leaseEnd, leased := m.nextLeaseEnd(now)
		var retryAt time.Time
		if leased {
			retryAt = leaseEnd
		}
		wait := !until.IsZero() && (m.pendingFree > 0 || (leased && !leaseEnd.After(until)))
		if !wait {
			m.stats.AllocFailures++
		}
		switch {
		case m.pendingFree > 0:
			err = store.Errorf(store.NoAvailableHandle, "key %q: no segment has %d free bytes; %d bytes evicted to the disk tier are still being copied there (asynchronous eviction): retry", key, size, m.pendingFree)
		case leased:
			err = store.Errorf(store.NoAvailableHandle, "key %q: no segment has %d free bytes; the DRAM eviction could not free is held by leases (the first ends in %v), pins or writes in progress: retry", key, size, leaseEnd.Sub(now))
		default:
			err = store.Errorf(store.NoAvailableHandle, "key %q: no segment has %d free bytes", key, size)
		}
		return nil, retryAt, wait, err
	}
	m.adopt(o, client, cfg.ReplicaNum)
	return m.descs(o), time.Time{}, false, nil
}

// evictTarget is the bytes one eviction pass frees: eviction_ratio of the
// capacity, and at least need.
func (m *Master) evictTarget(need uint64) uint64 {
	t := uint64(m.cfg.EvictionRatio * float64(m.capacity))
	return max(t, need)
}

// PutEnd marks key's replicas complete: the object becomes readable and the
// most recently used; with Config.EnableOffload and without OffloadOnEvict
// it is queued for offload to a disk tier (tier.go). Idempotent on a
// complete object. Errors:
// OBJECT_NOT_FOUND; ILLEGAL_CLIENT (another client's write). Mirrors
// upstream PutEnd.
func (m *Master) PutEnd(client, key string) error {
	o := m.objects.get(key)
	if o == nil {
		return store.Errorf(store.ObjectNotFound, "key %q", key)
	}
	if w := m.owners.name(o.owner); w != client {
		return store.Errorf(store.IllegalClient, "key %q is written by %q, not %q", key, w, client)
	}
	m.touchClient(client)
	if o.complete {
		return nil
	}
	m.complete(o)
	return nil
}

// complete makes o (in the table, written) complete: readable, the most
// recently used, and queued for offload where the config asks for it.
func (m *Master) complete(o *object) {
	o.complete = true
	m.unmarkPrecommit(o)
	m.pol.insert(o)
	m.refreshSoftPin(o)
	m.observeCommitted(o)
	if !m.cfg.OffloadOnEvict {
		if t, src, ok := m.offloadSource(o); ok {
			m.queueOffload(o, t, src, false)
		}
	}
}

// PutRevoke abandons an unfinished write of key and frees its space.
// Errors: OBJECT_NOT_FOUND; ILLEGAL_CLIENT; INVALID_WRITE (already
// complete). Mirrors upstream PutRevoke.
func (m *Master) PutRevoke(client, key string) error {
	o := m.objects.get(key)
	if o == nil {
		return store.Errorf(store.ObjectNotFound, "key %q", key)
	}
	if w := m.owners.name(o.owner); w != client {
		return store.Errorf(store.IllegalClient, "key %q is written by %q, not %q", key, w, client)
	}
	if o.complete {
		return store.Errorf(store.InvalidWrite, "key %q is complete; nothing to revoke", key)
	}
	m.free(o)
	return nil
}

// GetReplicaList returns key's readable DRAM replicas and grants (or
// extends) a lease of DefaultLeaseTTL from now, during which the object is
// neither evicted nor removed without force; the read counts as a use for
// LRU. An object only on a disk tier is staged back into DRAM (see
// GetOrLoad) and reported REPLICA_IS_NOT_READY until it is. Errors:
// OBJECT_NOT_FOUND; REPLICA_IS_NOT_READY (still being written, or being
// loaded from disk); NO_AVAILABLE_HANDLE (no DRAM to stage a disk-only
// object); INVALID_PARAMS / INVALID_KEY for a bad key. Mirrors upstream
// GetReplicaList.
func (m *Master) GetReplicaList(key string) ([]Replica, time.Duration, error) {
	reps, ttl, loading, err := m.GetOrLoad(key)
	if loading {
		return nil, 0, store.Errorf(store.ReplicaIsNotReady, "key %q is being loaded from disk", key)
	}
	return reps, ttl, err
}

// grant leases o; a use for LRU when o is in DRAM.
func (m *Master) grant(o *object) {
	now := m.cfg.Now()
	fresh := !m.leased(o, now)
	until := m.stamp(now.Add(m.cfg.DefaultLeaseTTL))
	if until > o.leaseUntil {
		o.leaseUntil = until
	}
	if o.nreps() > 0 {
		m.pol.use(o, fresh)
	}
	m.refreshSoftPin(o)
}

// ExistKey reports whether key has a readable replica; a true answer grants
// a lease like GetReplicaList (upstream does the same). Errors: INVALID_PARAMS
// / INVALID_KEY for a bad key.
func (m *Master) ExistKey(key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	o := m.objects.get(key)
	if o == nil || !o.complete {
		m.pol.missed()
		return false, nil
	}
	m.grant(o)
	return true, nil
}

// Remove deletes key and frees its space (DRAM and disk replicas); a soft
// pin does not protect it. Errors: OBJECT_NOT_FOUND; REPLICA_IS_NOT_READY
// (being written); OBJECT_HAS_LEASE (leased, or hard-pinned, and not
// force); OBJECT_REPLICA_BUSY (a disk tier owner is copying it, and not
// force). Mirrors upstream Remove(key, force).
func (m *Master) Remove(key string, force bool) error {
	if err := checkKey(key); err != nil {
		return err
	}
	o := m.objects.get(key)
	if o == nil {
		return store.Errorf(store.ObjectNotFound, "key %q", key)
	}
	if err := m.removable(o, force, m.cfg.Now()); err != nil {
		return err
	}
	m.free(o)
	return nil
}

// Tick runs the periodic duties: unmount segments of clients whose TTL
// passed, release expired discarded writes, abandon tier tasks past their
// deadline, and evict when usage is above
// the high watermark (freeing max(eviction_ratio, usage - watermark +
// eviction_ratio) of capacity, as upstream). It returns the keys evicted.
func (m *Master) Tick() (evicted int) {
	now := m.cfg.Now()
	for c, st := range m.clients {
		if now.After(st.deadline) {
			delete(m.clients, c)
			for _, s := range append([]*segment(nil), m.order...) {
				if s.client == c {
					_ = m.UnmountSegment(s.ID, c)
				}
			}
		}
	}
	m.releaseDiscards(now)
	m.expireReservations(now)
	m.expireTasks(now)
	if m.capacity == 0 {
		return 0
	}
	// Reservations are left out: space held for puts about to be made
	// must not evict stored values (the put evicts if it has to).
	usage := float64(m.used-m.resvBytes) / float64(m.capacity)
	if usage <= m.cfg.EvictionHighWatermark || m.cfg.EvictionHighWatermark >= 1 {
		return 0
	}
	frac := max(m.cfg.EvictionRatio, usage-m.cfg.EvictionHighWatermark+m.cfg.EvictionRatio)
	before := m.stats.EvictedObjects
	m.evict(now, uint64(frac*float64(m.capacity)))
	return int(m.stats.EvictedObjects - before)
}

func (m *Master) releaseDiscards(now time.Time) {
	kept := m.discards[:0]
	for _, d := range m.discards {
		if now.Before(d.release) {
			kept = append(kept, d)
			continue
		}
		for _, p := range d.pieces {
			if p.seg.alloc.FreeSized(p.offset, p.size) == nil {
				m.stats.DiscardedBytes -= p.size
				m.used -= p.size
				m.spaceSeq++
			}
		}
	}
	m.discards = kept
}

// Stats returns a usage snapshot.
func (m *Master) Stats() Stats {
	s := m.stats
	s.Reservations, s.Reserved = m.Reservations()
	s.Capacity, s.Used = m.capacity, m.used-s.Reserved
	s.Objects, s.Segments, s.Clients = m.objects.len(), len(m.order), len(m.clients)
	s.SoftPinned, s.HardPinned = m.pinned.soft, m.pinned.hard
	s.DiskCapacity, s.PendingOffloadBytes = m.diskCapacity, m.pendingFree
	for _, seg := range m.order {
		st := seg.alloc.Stats()
		rb, rn := m.reservedOn(seg)
		d := SegmentStats{ID: seg.ID, Name: seg.Name, Capacity: seg.Size, Used: st.Used - rb, Objects: seg.nobj - rn, Reserved: rb, Reservations: rn}
		if t := seg.disk; t != nil {
			d.DiskCapacity, d.DiskUsed, d.DiskObjects = t.capacity, t.used, t.objects.len()
			s.DiskUsed += t.used
			s.DiskObjects += t.objects.len()
		}
		s.SegmentsDetail = append(s.SegmentsDetail, d)
	}
	return s
}

// ObjectCount is Stats().Objects without building the rest of Stats: the
// keys in the table (complete or being written).
func (m *Master) ObjectCount() int { return m.objects.len() }

// String is a one-line summary for logs.
func (s Stats) String() string {
	return fmt.Sprintf("used %d/%d bytes, %d objects, %d segments, %d evicted", s.Used, s.Capacity, s.Objects, s.Segments, s.EvictedObjects)
}
