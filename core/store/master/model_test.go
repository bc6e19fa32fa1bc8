package master

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
)

// The property test runs seeded random operation sequences against a Master
// and a naive model of the pool and checks, after every step, that:
//   - the master's keys are exactly the model's, in the same state (it never
//     reports complete a key the model does not);
//   - a key disappears only when the model allows it: revoke/remove of that
//     key, the loss of its last segment, or eviction of a complete, unleased
//     object, and eviction takes the least recently used eligible objects
//     first;
//   - every call's error code is the one the model predicts;
//   - Stats.Used == sum(size*replicas) of live objects + DiscardedBytes, and
//     equals what the segments' allocators hold;
//   - replicas of one object lie on distinct segments and no two live ranges
//     (replicas or discarded writes) overlap on a segment.

const (
	modelLease     = 10 * time.Second
	modelDiscardTO = 30 * time.Second
	modelRelease   = 120 * time.Second
	modelClient    = 60 * time.Second
)

type modelObj struct {
	complete   bool
	owner      string
	started    time.Time
	size       uint64
	reps       [][]string        // per replica, the segment ids of its pieces (one unless striped)
	pieceSize  map[string]uint64 // segment id -> bytes of the piece there
	leaseUntil time.Time
	lastUse    int // recency stamp; larger is more recent (complete objects)
}

type modelDiscard struct {
	seg     string
	size    uint64
	release time.Time
}

type model struct {
	objs     map[string]*modelObj
	discards []modelDiscard
	clients  map[string]modelClientState
	segs     map[string]Segment
	owner    map[string]string // segment id -> client
	useClock int
}

// modelClientState is a live client: its deadline, and whether it mounted
// since the master learnt of it (only Ping and the mounts create clients).
type modelClientState struct {
	deadline time.Time
	mounted  bool
}

func newModel() *model {
	return &model{objs: map[string]*modelObj{}, clients: map[string]modelClientState{}, segs: map[string]Segment{}, owner: map[string]string{}}
}

// touch refreshes a known client's deadline; it creates none.
func (md *model) touch(c string, now time.Time) {
	if st, ok := md.clients[c]; ok {
		st.deadline = now.Add(modelClient)
		md.clients[c] = st
	}
}

// mounted records a mount by c.
func (md *model) mounted(c string, now time.Time) {
	md.clients[c] = modelClientState{deadline: now.Add(modelClient), mounted: true}
}

func (md *model) use(o *modelObj) {
	md.useClock++
	o.lastUse = md.useClock
}

func (md *model) unmount(id string) {
	for k, o := range md.objs {
		o.reps = slices.DeleteFunc(o.reps, func(r []string) bool { return slices.Contains(r, id) })
		if len(o.reps) == 0 {
			delete(md.objs, k)
		}
	}
	md.discards = slices.DeleteFunc(md.discards, func(d modelDiscard) bool { return d.seg == id })
	delete(md.segs, id)
	delete(md.owner, id)
}

func (md *model) releaseDiscards(now time.Time) int {
	n := len(md.discards)
	md.discards = slices.DeleteFunc(md.discards, func(d modelDiscard) bool { return !now.Before(d.release) })
	return n - len(md.discards)
}

// evictable returns the keys eviction may take now, least recently used first.
func (md *model) evictable(now time.Time) []string {
	var ks []string
	for k, o := range md.objs {
		if o.complete && !o.leaseUntil.After(now) {
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool { return md.objs[ks[i]].lastUse < md.objs[ks[j]].lastUse })
	return ks
}

type propRun struct {
	t     *testing.T
	r     *rand.Rand
	m     *Master
	clk   *fakeClock
	md    *model
	trace strings.Builder
	nseg  int
	seen  map[string]int // outcome -> count, to check the run's coverage
}

var propClients = []string{"c0", "c1", "c2"}

func (p *propRun) wantCode(step int, op string, err error, want store.ErrorCode) {
	p.t.Helper()
	if got := store.CodeOf(err); got != want {
		p.t.Fatalf("step %d %s: got %v (%v), model wants %v", step, op, got, err, want)
	}
	p.seen[op[:strings.IndexByte(op+"(", '(')]+" "+want.String()]++
}

func (p *propRun) step(i int) {
	t, r, m, md, now := p.t, p.r, p.m, p.md, p.clk.Now()
	client := propClients[r.IntN(len(propClients))]
	key := fmt.Sprintf("k%d", r.IntN(12))
	mayEvict := false
	var op string
	switch n := r.IntN(100); {
	case n < 30:
		size := []uint64{64, 100, 256, 700, 1500}[r.IntN(5)]
		rn := 1 + r.IntN(3)
		cfg := ReplicaConfig{ReplicaNum: rn}
		if r.IntN(4) == 0 && len(md.segs) > 0 {
			ids := sortedKeys(md.segs)
			cfg.PreferredSegment = md.segs[ids[r.IntN(len(ids))]].Name
		}
		op = fmt.Sprintf("PutStart(%s,%s,%d,%d,%q)", client, key, size, rn, cfg.PreferredSegment)
		before := m.Stats().EvictedObjects
		rs, err := m.PutStart(client, key, size, cfg)
		md.touch(client, now)
		p.seen["discard released"] += md.releaseDiscards(now)
		if o, ok := md.objs[key]; ok && (o.complete || now.Sub(o.started) < modelDiscardTO) {
			p.wantCode(i, op, err, store.ObjectAlreadyExists)
			break
		} else if ok {
			p.seen["takeover"]++
			for _, r := range o.reps {
				for _, s := range r {
					md.discards = append(md.discards, modelDiscard{seg: s, size: o.pieceSize[s], release: now.Add(modelRelease)})
				}
			}
			delete(md.objs, key)
		}
		mayEvict = true
		evictable := md.evictable(now)
		if err != nil {
			p.wantCode(i, op, err, store.NoAvailableHandle)
		} else {
			p.seen["PutStart OK"]++
			if len(rs) < 1 || len(rs) > min(rn, len(md.segs)) {
				t.Fatalf("step %d %s: %d replicas with %d segments", i, op, len(rs), len(md.segs))
			}
			checkReplicas(t, rs, md.segs, size, ReplicaProcessing, len(rs))
			o := &modelObj{owner: client, started: now, size: size, reps: repSegs(rs), pieceSize: map[string]uint64{}}
			for _, x := range rs {
				for _, pc := range x.Pieces() {
					o.pieceSize[pc.SegmentID] = pc.Size
				}
			}
			if len(rs) < rn {
				p.seen["partial"]++
			}
			for _, x := range rs {
				if len(x.Slices) > 0 {
					p.seen["striped"]++
				}
			}
			md.objs[key] = o
		}
		evicted := p.reconcileEvictions(i, op, evictable)
		p.seen["evicted by PutStart"] += evicted
		if got := m.Stats().EvictedObjects - before; got != uint64(evicted) {
			t.Fatalf("step %d %s: EvictedObjects grew by %d, %d keys vanished", i, op, got, evicted)
		}
	case n < 48:
		if o, ok := md.objs[key]; ok && r.IntN(5) > 0 {
			client = o.owner
		}
		op = fmt.Sprintf("PutEnd(%s,%s)", client, key)
		err := m.PutEnd(client, key)
		o, ok := md.objs[key]
		switch {
		case !ok:
			p.wantCode(i, op, err, store.ObjectNotFound)
		case o.owner != client:
			p.wantCode(i, op, err, store.IllegalClient)
		default:
			p.wantCode(i, op, err, store.OK)
			md.touch(client, now)
			if !o.complete {
				o.complete = true
				md.use(o)
			}
		}
	case n < 53:
		if o, ok := md.objs[key]; ok && r.IntN(5) > 0 {
			client = o.owner
		}
		op = fmt.Sprintf("PutRevoke(%s,%s)", client, key)
		err := m.PutRevoke(client, key)
		o, ok := md.objs[key]
		switch {
		case !ok:
			p.wantCode(i, op, err, store.ObjectNotFound)
		case o.owner != client:
			p.wantCode(i, op, err, store.IllegalClient)
		case o.complete:
			p.wantCode(i, op, err, store.InvalidWrite)
		default:
			p.wantCode(i, op, err, store.OK)
			delete(md.objs, key)
		}
	case n < 66:
		op = fmt.Sprintf("GetReplicaList(%s)", key)
		rs, ttl, err := m.GetReplicaList(key)
		o, ok := md.objs[key]
		switch {
		case !ok:
			p.wantCode(i, op, err, store.ObjectNotFound)
		case !o.complete:
			p.wantCode(i, op, err, store.ReplicaIsNotReady)
		default:
			p.wantCode(i, op, err, store.OK)
			if ttl != modelLease {
				t.Fatalf("step %d %s: lease %v", i, op, ttl)
			}
			checkReplicas(t, rs, md.segs, o.size, ReplicaComplete, len(o.reps))
			if got := repSegs(rs); !sameReps(got, o.reps) {
				t.Fatalf("step %d %s: replicas on %v, model %v", i, op, got, o.reps)
			}
			o.leaseUntil = now.Add(modelLease)
			md.use(o)
		}
	case n < 71:
		op = fmt.Sprintf("ExistKey(%s)", key)
		got, err := m.ExistKey(key)
		p.wantCode(i, op, err, store.OK)
		o, ok := md.objs[key]
		want := ok && o.complete
		if got != want {
			t.Fatalf("step %d %s = %v, model %v", i, op, got, want)
		}
		if want {
			o.leaseUntil = now.Add(modelLease)
			md.use(o)
		}
	case n < 78:
		force := r.IntN(3) == 0
		op = fmt.Sprintf("Remove(%s,%v)", key, force)
		err := m.Remove(key, force)
		o, ok := md.objs[key]
		switch {
		case !ok:
			p.wantCode(i, op, err, store.ObjectNotFound)
		case !o.complete:
			p.wantCode(i, op, err, store.ReplicaIsNotReady)
		case !force && o.leaseUntil.After(now):
			p.wantCode(i, op, err, store.ObjectHasLease)
		default:
			p.wantCode(i, op, err, store.OK)
			delete(md.objs, key)
		}
	case n < 86:
		d := time.Duration(r.IntN(20_000)) * time.Millisecond
		op = fmt.Sprintf("Advance(%v)", d)
		p.clk.Advance(d)
	case n < 91:
		op = "Tick"
		evictedN := m.Tick()
		for c, st := range md.clients {
			if now.After(st.deadline) {
				delete(md.clients, c)
				p.seen["client expired"]++
				for id, owner := range md.owner {
					if owner == c {
						md.unmount(id)
					}
				}
			}
		}
		p.seen["discard released"] += md.releaseDiscards(now)
		mayEvict = true
		if got := p.reconcileEvictions(i, op, md.evictable(now)); got != evictedN {
			t.Fatalf("step %d Tick returned %d, %d keys evicted", i, evictedN, got)
		}
		p.seen["evicted by Tick"] += evictedN
	case n < 95:
		op = fmt.Sprintf("Ping(%s)", client)
		need, err := m.Ping(client)
		p.wantCode(i, op, err, store.OK)
		st := md.clients[client]
		if need == st.mounted {
			t.Fatalf("step %d %s: needRemount %v, model knows the client's segments: %v", i, op, need, st.mounted)
		}
		st.deadline = now.Add(modelClient)
		md.clients[client] = st
	case n < 98:
		if len(md.segs) > 0 && r.IntN(5) == 0 {
			ids := sortedKeys(md.segs)
			id := ids[r.IntN(len(ids))]
			op = fmt.Sprintf("MountSegment(dup %s)", id)
			p.wantCode(i, op, m.MountSegment(testSeg(id, 1024), client), store.SegmentAlreadyExists)
			break
		}
		p.nseg++
		s := testSeg(fmt.Sprintf("s%d", p.nseg), uint64(1024*(1+r.IntN(8))))
		op = fmt.Sprintf("MountSegment(%s,%d,%s)", s.ID, s.Size, client)
		p.wantCode(i, op, m.MountSegment(s, client), store.OK)
		md.segs[s.ID], md.owner[s.ID] = s, client
		md.mounted(client, now)
	default:
		id := "nope"
		if len(md.segs) > 0 && r.IntN(4) > 0 {
			ids := sortedKeys(md.segs)
			id = ids[r.IntN(len(ids))]
		}
		op = fmt.Sprintf("UnmountSegment(%s)", id)
		err := m.UnmountSegment(id, client)
		if _, ok := md.segs[id]; !ok {
			p.wantCode(i, op, err, store.SegmentNotFound)
		} else {
			p.wantCode(i, op, err, store.OK)
			md.unmount(id)
		}
	}
	if !mayEvict {
		p.reconcileEvictions(i, op, nil)
	}
	st := m.Stats()
	fmt.Fprintf(&p.trace, "%s -> used %d objs %d\n", op, st.Used, st.Objects)
	p.checkInvariants(i, op)
}

// reconcileEvictions drops from the model the keys the master no longer
// has; each must be an eviction victim, and together they must be the
// least recently used prefix of evictable. It returns how many vanished.
func (p *propRun) reconcileEvictions(i int, op string, evictable []string) int {
	p.t.Helper()
	var gone []string
	for k := range p.md.objs {
		if !present(p.m, k) {
			gone = append(gone, k)
		}
	}
	if len(gone) > len(evictable) || !sameSet(gone, evictable[:len(gone)]) {
		p.t.Fatalf("step %d %s: keys %v vanished; evictable in LRU order %v", i, op, gone, evictable)
	}
	for _, k := range gone {
		delete(p.md.objs, k)
	}
	return len(gone)
}

func (p *propRun) checkInvariants(i int, op string) {
	t, m, md := p.t, p.m, p.md
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("step %d %s: %s", i, op, fmt.Sprintf(format, args...))
	}
	st := m.Stats()
	// Keys and states.
	if m.objects.len() != len(md.objs) || st.Objects != len(md.objs) {
		fail("master has %d keys (stats %d), model %d", m.objects.len(), st.Objects, len(md.objs))
	}
	if err := checkSegmentCounts(m); err != nil {
		fail("%v", err)
	}
	var live, lruWant uint64
	for o := range m.objects.all {
		k := o.key
		mo, ok := md.objs[k]
		if !ok {
			fail("master has key %q the model does not", k)
		}
		if o.complete != mo.complete {
			fail("key %q complete=%v, model %v", k, o.complete, mo.complete)
		}
		var reps [][]string
		var one [1]replica
		for _, r := range o.replicas(&one) {
			var ids []string
			var sum uint64
			for _, pc := range r.parts(o.size) {
				ids = append(ids, pc.seg.ID)
				sum += pc.size
			}
			if sum != o.size {
				fail("key %q: a replica's pieces hold %d bytes of %d", k, sum, o.size)
			}
			reps = append(reps, ids)
		}
		if !sameReps(reps, mo.reps) || len(reps) == 0 {
			fail("key %q replicas on %v, model %v", k, reps, mo.reps)
		}
		live += o.size * uint64(o.nreps())
		if o.complete {
			lruWant++
		}
	}
	// The LRU ring holds exactly the complete objects.
	var lruN uint64
	for o := range m.pol.order {
		if !o.complete || m.objects.get(o.key) != o {
			fail("LRU holds %q (complete %v, in table %v)", o.key, o.complete, m.objects.get(o.key) == o)
		}
		lruN++
	}
	if lruN != lruWant {
		fail("LRU has %d objects, %d complete", lruN, lruWant)
	}
	// Space accounting.
	var disc uint64
	for _, d := range md.discards {
		disc += d.size
	}
	if st.DiscardedBytes != disc {
		fail("DiscardedBytes %d, model %d", st.DiscardedBytes, disc)
	}
	if st.Used != live+disc {
		fail("Used %d, live %d + discarded %d", st.Used, live, disc)
	}
	var allocUsed, capacity uint64
	for _, sd := range st.SegmentsDetail {
		allocUsed += sd.Used
		capacity += sd.Capacity
	}
	if allocUsed != st.Used {
		fail("allocators hold %d bytes, Used %d", allocUsed, st.Used)
	}
	var mcap uint64
	for _, s := range md.segs {
		mcap += s.Size
	}
	if st.Capacity != mcap || capacity != mcap || st.Segments != len(md.segs) {
		fail("capacity %d/%d segments %d, model %d/%d", st.Capacity, capacity, st.Segments, mcap, len(md.segs))
	}
	if st.Clients != len(md.clients) {
		fail("%d clients, model %d", st.Clients, len(md.clients))
	}
	// No overlap on any segment.
	type rng struct {
		off, end uint64
		what     string
	}
	bySeg := map[*segment][]rng{}
	for o := range m.objects.all {
		k := o.key
		var one [1]replica
		for _, r := range o.replicas(&one) {
			for _, pc := range r.parts(o.size) {
				if m.segs[pc.seg.ID] != pc.seg {
					fail("key %q has a replica on unmounted segment %s", k, pc.seg.ID)
				}
				bySeg[pc.seg] = append(bySeg[pc.seg], rng{pc.offset, pc.offset + pc.size, k})
			}
		}
	}
	for _, d := range m.discards {
		for _, p := range d.pieces {
			if m.segs[p.seg.ID] != p.seg {
				fail("discarded range on unmounted %s@%d", p.seg.ID, p.offset)
			}
			bySeg[p.seg] = append(bySeg[p.seg], rng{p.offset, p.offset + p.size, "discarded"})
		}
	}
	for s, rs := range bySeg {
		sort.Slice(rs, func(a, b int) bool { return rs[a].off < rs[b].off })
		for j, x := range rs {
			if x.end > s.Size {
				fail("%s [%d,%d) beyond segment %s of %d bytes", x.what, x.off, x.end, s.ID, s.Size)
			}
			if j > 0 && rs[j-1].end > x.off {
				fail("%s [%d,%d) overlaps %s [%d,%d) on %s", rs[j-1].what, rs[j-1].off, rs[j-1].end, x.what, x.off, x.end, s.ID)
			}
		}
		if got := s.alloc.Stats().Allocations; got != len(rs) {
			fail("segment %s: %d allocations, %d live ranges", s.ID, got, len(rs))
		}
	}
	// The allocators (which record no sizes) hold exactly those ranges:
	// every gap between them is free, and they hold the rest.
	for _, s := range m.order {
		rs := bySeg[s]
		var pos, used uint64
		for _, x := range append(rs, rng{s.Size, s.Size, "end"}) {
			if x.off > pos {
				if err := s.alloc.AllocAt(pos, x.off-pos); err != nil {
					fail("segment %s: gap [%d,%d) is not free: %v", s.ID, pos, x.off, err)
				}
				if err := s.alloc.FreeSized(pos, x.off-pos); err != nil {
					fail("segment %s: FreeSized(%d, %d): %v", s.ID, pos, x.off-pos, err)
				}
			}
			used += x.end - x.off
			pos = x.end
		}
		if st := s.alloc.Stats(); st.Used != used || st.Allocations != len(rs) {
			fail("segment %s: allocator holds %d bytes in %d ranges, table %d in %d", s.ID, st.Used, st.Allocations, used, len(rs))
		}
	}
}

// repSegs is the segment ids of each replica's pieces.
func repSegs(rs []Replica) [][]string {
	out := make([][]string, len(rs))
	for i, r := range rs {
		for _, s := range r.Pieces() {
			out[i] = append(out[i], s.SegmentID)
		}
	}
	return out
}

// sameReps compares replica placements ignoring replica order.
func sameReps(a, b [][]string) bool {
	key := func(rs [][]string) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = strings.Join(r, ",")
		}
		return out
	}
	return sameSet(key(a), key(b))
}

func sortedKeys[V any](mp map[string]V) []string {
	ks := make([]string, 0, len(mp))
	for k := range mp {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func runProperty(t *testing.T, seed uint64, steps int, seen map[string]int) uint64 {
	clk := newFakeClock()
	m, err := New(Config{
		DefaultLeaseTTL:        modelLease,
		EvictionRatio:          0.1,
		EvictionHighWatermark:  0.8,
		PutStartDiscardTimeout: modelDiscardTO,
		PutStartReleaseTimeout: modelRelease,
		ClientTTL:              modelClient,
		Now:                    clk.Now,
		Rand:                   rand.New(rand.NewPCG(seed, 99)),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &propRun{t: t, r: rand.New(rand.NewPCG(seed, 1)), m: m, clk: clk, md: newModel(), seen: seen}
	// Start with a few segments so puts mostly succeed.
	for range 3 {
		p.nseg++
		s := testSeg(fmt.Sprintf("s%d", p.nseg), 4096)
		c := propClients[p.nseg%len(propClients)]
		if err := m.MountSegment(s, c); err != nil {
			t.Fatal(err)
		}
		p.md.segs[s.ID], p.md.owner[s.ID] = s, c
		p.md.mounted(c, clk.Now())
	}
	for i := range steps {
		p.step(i)
	}
	h := fnv.New64a()
	h.Write([]byte(p.trace.String()))
	return h.Sum64()
}

func TestPropertyAgainstModel(t *testing.T) {
	steps := 4000
	if testing.Short() {
		steps = 500
	}
	seen := map[string]int{}
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			a := runProperty(t, seed, steps, seen)
			// Metamorphic: the same seeds replay identically (the master reads
			// time and randomness only through its Config).
			if b := runProperty(t, seed, steps, map[string]int{}); a != b {
				t.Fatalf("replay of seed %d diverged", seed)
			}
		})
	}
	t.Logf("outcomes: %v", seen)
	// The generator must reach every interesting path, or the property
	// checks prove little.
	for _, want := range []string{
		"PutStart OK", "PutStart OBJECT_ALREADY_EXISTS", "PutStart NO_AVAILABLE_HANDLE", "partial", "striped",
		"takeover", "discard released", "evicted by PutStart", "evicted by Tick", "client expired",
		"PutEnd OK", "PutEnd ILLEGAL_CLIENT", "PutEnd OBJECT_NOT_FOUND",
		"PutRevoke OK", "PutRevoke INVALID_WRITE", "PutRevoke ILLEGAL_CLIENT",
		"GetReplicaList OK", "GetReplicaList REPLICA_IS_NOT_READY", "GetReplicaList OBJECT_NOT_FOUND",
		"Remove OK", "Remove OBJECT_HAS_LEASE", "Remove REPLICA_IS_NOT_READY",
		"MountSegment OK", "MountSegment SEGMENT_ALREADY_EXISTS", "UnmountSegment OK", "UnmountSegment SEGMENT_NOT_FOUND",
	} {
		if seen[want] == 0 {
			t.Errorf("no step reached %q", want)
		}
	}
}

// checkSegmentCounts checks every segment's object count (and, on a
// segment with a disk tier, its object set) against a scan of the table.
func checkSegmentCounts(m *Master) error {
	for _, s := range m.order {
		n := 0
		for o := range m.objects.all {
			if !m.onSegment(o, s) {
				continue
			}
			n++
			if s.objects != nil {
				if _, ok := s.objects.m[o]; !ok {
					return fmt.Errorf("segment %s (disk tier) does not list %q", s.ID, o.key)
				}
			}
		}
		if s.nobj != n {
			return fmt.Errorf("segment %s counts %d objects, %d have a range there", s.ID, s.nobj, n)
		}
		if (s.disk != nil) != (s.objects != nil) {
			return fmt.Errorf("segment %s: disk tier %v, object set %v", s.ID, s.disk != nil, s.objects != nil)
		}
		if s.objects != nil && s.objects.len() != n {
			return fmt.Errorf("segment %s lists %d objects, %d have a range there", s.ID, s.objects.len(), n)
		}
	}
	return nil
}
