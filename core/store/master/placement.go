package master

import (
	"cmp"
	"hash/fnv"
	"math"
	"net"
	"slices"
	"sort"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
)

// Allocation strategies (Config.AllocationStrategy, upstream
// --allocation_strategy). Every strategy tries the preferred segments first
// (ReplicaConfig.PreferredSegments, then PreferredSegment), whatever their
// kind, and puts the replicas of one value on distinct segments.
//
// Standalone first (ours; upstream places on every segment alike):
// random and free_ratio_first run twice, first over the
// store.SegmentStandalone segments only, then, for the replicas still
// missing, over the store.SegmentEmbedded ones, each pass with the
// strategy's own order and rules. An embedded segment vanishes with the
// application that mounted it (an inference engine), so its writes are
// kept on segments that outlive it while those have room. When neither
// pass places every replica, the put evicts (least recently used, over
// all segments) and both passes run again (allocate): a full standalone
// tier therefore overflows onto embedded segments before anything is
// evicted, which keeps a pool that is short of standalone memory from
// evicting while DRAM is free. local_first with a writer host keeps its
// host order and ignores kinds: preferring the writer's host is an
// explicit choice (a writer wanting its saves to outlive it names a
// standalone segment as preferred, or runs without local_first); without
// a writer host it is random, standalone first. A striped value takes its
// pieces from standalone segments first (placeStriped). In a pool of one
// kind only, every strategy draws and places exactly as without kinds.
const (
	// StrategyRandom walks the segments in ID order from a random start
	// (upstream `random`, the default; upstream gives up after 100
	// segments, this walks them all); standalone segments first.
	StrategyRandom = "random"
	// StrategyFreeRatioFirst samples min(6 x replicas still wanted,
	// #segments) consecutive segments from a random start and tries them in
	// a random order weighted by free ratio (free/capacity), then falls back
	// to random; standalone segments first, then the same over the
	// embedded ones. Upstream sorts the sample by free ratio, so a freshly
	// joined empty segment takes every write until it is as full as the
	// rest (upstream issue #3688); weighting still favours emptier segments
	// (a segment twice as free is twice as likely to be first) without
	// sending them all the load.
	StrategyFreeRatioFirst = "free_ratio_first"
	// StrategyLocalFirst orders hosts cyclically in lexicographic order
	// starting at the writer's host (ReplicaConfig.HostID) and, within a
	// host, rotates its segments by a hash of the key (upstream
	// `local_first`), whatever their kind; without a writer host it is
	// random (standalone first).
	StrategyLocalFirst = "local_first"
)

// freeRatioSample is how many segments per wanted replica free_ratio_first
// samples (upstream: 6).
const freeRatioSample = 6

func checkStrategy(s string) error {
	switch s {
	case "", StrategyRandom, StrategyFreeRatioFirst, StrategyLocalFirst:
		return nil
	}
	return store.Errorf(store.InvalidParams, "allocation_strategy %q: want %s, %s or %s", s, StrategyRandom, StrategyFreeRatioFirst, StrategyLocalFirst)
}

// Slice is one piece of a striped replica: [Addr, Addr+Size) of the transfer
// segment named Segment holds the next Size bytes of the value.
type Slice struct {
	Segment   string // transport endpoint: the owner's transfer segment name
	SegmentID string
	Addr      uint64
	Size      uint64
}

// Pieces returns the replica as slices in value order: Slices when striped,
// else the one slice [Addr, Addr+Size) on Segment.
func (r Replica) Pieces() []Slice {
	if len(r.Slices) > 0 {
		return r.Slices
	}
	return []Slice{{Segment: r.Segment, SegmentID: r.SegmentID, Addr: r.Addr, Size: r.Size}}
}

// piece is one allocated range of a replica.
type piece struct {
	seg          *segment
	offset, size uint64
}

// parts returns r's ranges; size is the object's size.
func (r replica) parts(size uint64) []piece {
	if r.stripe != nil {
		return r.stripe
	}
	return []piece{{seg: r.seg, offset: r.offset, size: size}}
}

// on reports whether any range of r lies on s.
func (r replica) on(s *segment) bool {
	if r.stripe == nil {
		return r.seg == s
	}
	for _, p := range r.stripe {
		if p.seg == s {
			return true
		}
	}
	return false
}

func describe(o *object, r replica, st ReplicaStatus) Replica {
	if r.stripe == nil {
		return Replica{Segment: r.seg.Name, SegmentID: r.seg.ID, Addr: r.seg.Base + r.offset, Size: o.size, Status: st}
	}
	out := Replica{Size: o.size, Status: st, Slices: make([]Slice, len(r.stripe))}
	for i, p := range r.stripe {
		out.Slices[i] = Slice{Segment: p.seg.Name, SegmentID: p.seg.ID, Addr: p.seg.Base + p.offset, Size: p.size}
	}
	return out
}

// freeReplica releases r's ranges, except those on gone (a segment being
// unmounted, whose allocator is dropped whole).
func (m *Master) freeReplica(o *object, r replica, gone *segment) {
	m.spaceSeq++
	for _, p := range r.parts(o.size) {
		if p.seg == gone {
			m.used -= p.size
			continue
		}
		if err := p.seg.alloc.FreeSized(p.offset, p.size); err == nil {
			m.used -= p.size
		}
		p.seg.untrack(o)
	}
}

// freeReplicas releases all of o's replicas (as freeReplica, gone the
// same) and leaves o with none.
func (m *Master) freeReplicas(o *object, gone *segment) {
	var one [1]replica
	for _, r := range o.replicas(&one) {
		m.freeReplica(o, r, gone)
	}
	o.dropReplicas()
}

// dropReplicasOn drops o's replicas that have a range on s (a striped
// replica loses all its pieces), its LOCAL_DISK replica on s's disk tier
// and its tier task there; o leaves the table with its last replica.
func (m *Master) dropReplicasOn(o *object, s *segment) {
	var one [1]replica
	var kept []replica
	for _, r := range o.replicas(&one) {
		if r.on(s) {
			m.freeReplica(o, r, s)
		} else {
			kept = append(kept, r)
		}
	}
	o.setReplicas(kept)
	if t := o.task(); t != nil && t.pending > 0 {
		// An offload queued by eviction frees what is left.
		np := o.size * uint64(len(kept))
		m.pendingFree -= t.pending - np
		t.pending = np
	}
	if t := o.task(); t != nil && (t.tier.seg == s || (t.kind == TaskLoad && t.staging.seg == s)) {
		if t.kind == TaskLoad {
			m.stats.DiskMisses++ // a reader waits for it: its node left
		}
		m.cancelTask(o, s)
	}
	if d := o.disk(); d != nil && d.seg == s {
		m.detachDisk(o)
	}
	switch {
	case len(kept) == 0 && o.disk() == nil:
		m.forget(o)
	case len(kept) == 0:
		m.pol.remove(o) // only on disk now
	}
}

// forget takes o out of the table and the LRU list, cancels its tier task
// and drops its LOCAL_DISK replica.
func (m *Master) forget(o *object) {
	m.cancelTask(o, nil)
	m.detachDisk(o)
	m.pol.remove(o)
	if m.objects.get(o.key) != o {
		return
	}
	m.objects.del(o.key)
	m.unmarkPrecommit(o)
	m.owners.release(o.owner)
	if o.softPin {
		m.pinned.soft--
	}
	if o.hardPin {
		m.pinned.hard--
	}
}

// adopt puts a freshly placed o, written by client, into the table.
func (m *Master) adopt(o *object, client string, asked int) {
	o.owner = m.owners.intern(client)
	m.objects.put(o)
	if o.softPin {
		m.pinned.soft++
	}
	if o.hardPin {
		m.pinned.hard++
	}
	var one [1]replica
	rs := o.replicas(&one)
	if len(rs) < asked {
		m.stats.PartialPuts++
	}
	for _, r := range rs {
		if r.stripe != nil {
			m.stats.StripedPuts++
			break
		}
	}
}

// discard takes over an unfinished write: its ranges stay allocated (its
// writer may still be writing) until PutStartReleaseTimeout, as one
// contiguous discarded range per piece.
func (m *Master) discard(o *object, now time.Time) {
	var ps []piece
	var one [1]replica
	for _, r := range o.replicas(&one) {
		for _, p := range r.parts(o.size) {
			ps = append(ps, p)
			p.seg.untrack(o)
			m.stats.DiscardedBytes += p.size
		}
	}
	m.discards = append(m.discards, discarded{pieces: ps, release: now.Add(m.cfg.PutStartReleaseTimeout)})
	o.dropReplicas()
	m.forget(o)
}

// allocate places up to cfg.ReplicaNum replicas of o, evicting between
// rounds when short: each round tries standalone segments, then embedded
// ones, before evicting (see the strategies above). A value larger than
// every segment is striped; any other value is striped only as a last
// resort, when no segment has a free range large enough even after
// eviction (fragmentation, or space held by leased and pinned objects).
func (m *Master) allocate(o *object, cfg ReplicaConfig, now time.Time) {
	want := min(cfg.ReplicaNum, len(m.order))
	huge := true
	for _, s := range m.order {
		if s.Size >= o.size {
			huge = false
			break
		}
	}
	for round := 0; ; round++ {
		if huge {
			m.placeStriped(o, want)
		} else {
			m.place(o, want, cfg)
		}
		if o.nreps() == want || round == 4 {
			break
		}
		if m.evict(now, m.evictTarget(o.size)) == 0 {
			break
		}
	}
	if o.nreps() == 0 && !huge {
		m.placeStriped(o, 1)
	}
}

// kindRank orders segments for placement: standalone (0) before embedded
// (1).
func kindRank(s *segment) int {
	if s.Kind == store.SegmentStandalone {
		return 0
	}
	return 1
}

// has reports whether o already has a range on s.
func has(o *object, s *segment) bool {
	if o.seg == s {
		return true
	}
	var one [1]replica
	for _, r := range o.replicas(&one) {
		if r.on(s) {
			return true
		}
	}
	return false
}

// place allocates whole (contiguous) replicas of o until it has want of
// them, in the order of the configured strategy: preferred segments, then
// standalone segments, then embedded ones (local_first with a writer host:
// its host order over all segments).
func (m *Master) place(o *object, want int, cfg ReplicaConfig) {
	try := func(s *segment) {
		if o.nreps() >= want || has(o, s) {
			return
		}
		off, err := s.alloc.Alloc(o.size, AllocAlign)
		if err != nil {
			return
		}
		o.addReplica(replica{seg: s, offset: off})
		s.track(o)
		m.used += o.size
	}
	for _, name := range cfg.PreferredSegments {
		m.tryNamed(name, try)
	}
	m.tryNamed(cfg.PreferredSegment, try)
	if len(m.order) == 0 || o.nreps() >= want {
		return
	}
	if m.cfg.AllocationStrategy == StrategyLocalFirst {
		if host := writerHost(cfg); host != "" {
			for _, s := range m.localOrder(host, o.key) {
				try(s)
			}
			return
		}
	}
	for _, segs := range [...][]*segment{m.standalone, m.embedded} {
		if o.nreps() >= want {
			return
		}
		m.placeOn(segs, o, want, try)
	}
}

// placeOn is one pass of random or free_ratio_first over segs (sorted by
// ID). An empty segs draws nothing from Config.Rand.
func (m *Master) placeOn(segs []*segment, o *object, want int, try func(*segment)) {
	n := len(segs)
	if n == 0 {
		return
	}
	if m.cfg.AllocationStrategy == StrategyFreeRatioFirst {
		for _, s := range m.freeRatioSample(segs, o, want-o.nreps()) {
			try(s)
		}
	}
	// random, and the fallback of free_ratio_first.
	start := m.cfg.Rand.IntN(n)
	for i := 0; i < n && o.nreps() < want; i++ {
		try(segs[(start+i)%n])
	}
}

// tryNamed calls try on every segment named name ("" = none).
func (m *Master) tryNamed(name string, try func(*segment)) {
	if name == "" {
		return
	}
	for _, s := range m.order {
		if s.Name == name {
			try(s)
		}
	}
}

// freeRatioSample returns min(6 x remaining, len(segs)) consecutive
// segments of segs (not empty) from a random start, not yet holding a
// replica of o, in a random order weighted by free ratio
// (Efraimidis-Spirakis: key u^(1/w), largest first); full segments come
// last.
func (m *Master) freeRatioSample(segs []*segment, o *object, remaining int) []*segment {
	n := len(segs)
	k := min(freeRatioSample*remaining, n)
	start := m.cfg.Rand.IntN(n)
	type cand struct {
		s   *segment
		key float64
	}
	cs := make([]cand, 0, k)
	for i := range k {
		s := segs[(start+i)%n]
		if has(o, s) {
			continue
		}
		st := s.alloc.Stats()
		w := float64(st.Free) / float64(st.Capacity)
		key := math.Inf(-1)
		if w > 0 {
			// log(u)/w orders like u^(1/w); u in (0,1].
			key = math.Log(1-m.cfg.Rand.Float64()) / w
		}
		cs = append(cs, cand{s, key})
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return cmp.Compare(b.key, a.key) })
	out := make([]*segment, len(cs))
	for i, c := range cs {
		out[i] = c.s
	}
	return out
}

// hostOf is the host part of a segment name "host:port", or the name.
func hostOf(name string) string {
	if h, _, err := net.SplitHostPort(name); err == nil {
		return h
	}
	return name
}

func segHost(s *segment) string {
	if s.HostID != "" {
		return s.HostID
	}
	return hostOf(s.Name)
}

func writerHost(cfg ReplicaConfig) string {
	if cfg.HostID != "" {
		return cfg.HostID
	}
	if cfg.PreferredSegment != "" {
		return hostOf(cfg.PreferredSegment)
	}
	return ""
}

// localOrder is local_first's order: hosts in lexicographic order starting
// at host (or the next host after it, cyclically); each host's segments, in
// ID order, rotated by a hash of key so that one host's writes spread over
// its segments.
func (m *Master) localOrder(host, key string) []*segment {
	byHost := map[string][]*segment{}
	var hosts []string
	for _, s := range m.order {
		h := segHost(s)
		if _, ok := byHost[h]; !ok {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], s)
	}
	sort.Strings(hosts)
	first := sort.SearchStrings(hosts, host)
	hash := fnv.New64a()
	hash.Write([]byte(key))
	rot := hash.Sum64()
	out := make([]*segment, 0, len(m.order))
	for i := range hosts {
		segs := byHost[hosts[(first+i)%len(hosts)]]
		r := int(rot % uint64(len(segs)))
		out = append(out, segs[r:]...)
		out = append(out, segs[:r]...)
	}
	return out
}

// placeStriped adds striped replicas of o until it has want replicas or the
// free space runs out. Each replica takes the largest free ranges of
// segments holding nothing of o, one piece per segment: those of
// standalone segments first, largest first (fewest pieces), then those of
// embedded segments, largest first; a replica that cannot be completed is
// rolled back. A stripe that needs one piece only is an ordinary
// contiguous replica.
func (m *Master) placeStriped(o *object, want int) {
	for o.nreps() < want {
		type cand struct {
			s       *segment
			largest uint64
		}
		var cs []cand
		for _, s := range m.order {
			if has(o, s) {
				continue
			}
			if lf := s.alloc.Stats().LargestFree; lf > 0 {
				cs = append(cs, cand{s, lf})
			}
		}
		slices.SortStableFunc(cs, func(a, b cand) int {
			return cmp.Or(cmp.Compare(kindRank(a.s), kindRank(b.s)), cmp.Compare(b.largest, a.largest))
		})
		var ps []piece
		rest := o.size
		for _, c := range cs {
			if rest == 0 {
				break
			}
			n := min(rest, c.largest)
			off, err := c.s.alloc.Alloc(n, AllocAlign)
			if err != nil && c.largest > AllocAlign {
				// The largest range may start misaligned: leave room for
				// the padding.
				n = min(rest, c.largest-(AllocAlign-1))
				off, err = c.s.alloc.Alloc(n, AllocAlign)
			}
			if err != nil {
				continue
			}
			ps = append(ps, piece{seg: c.s, offset: off, size: n})
			rest -= n
		}
		if rest > 0 || len(ps) == 0 {
			for _, p := range ps {
				_ = p.seg.alloc.FreeSized(p.offset, p.size)
			}
			return
		}
		r := replica{seg: ps[0].seg, offset: ps[0].offset}
		if len(ps) > 1 {
			r.stripe = ps
		}
		for _, p := range ps {
			p.seg.track(o)
			m.used += p.size
		}
		o.addReplica(r)
	}
}
