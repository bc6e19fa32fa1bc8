package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Reserved puts (ours; upstream's put is PutStart, write, PutEnd: two
// master round trips). The client keeps, per value size, a few
// reservations: space the master placed ahead of time under no key
// (storepb.PutCommitRequest). A put of a size it holds one for writes
// the value there and commits it under its key in one call, whose answer
// brings a new reservation of the same size: one master round trip per
// put. A size it holds none for is put the two-call way while a
// reservation is asked for in the background, so the next put of that
// size finds one.
//
// Safety: a reservation is written only within reserveMaxAge of the
// answer that granted it and only on the Session stream that carried
// that answer, so space a restarted or failed-over master (which knows
// no reservations) handed to another object is never written (a
// failover takes at least the etcd session TTL, 5 s); the master takes
// over an unused reservation only after its reservation TTL (30 s), and
// then holds the space as it does for a stale PutStart. A commit that
// fails for any reason but a bad key (the reservation was lost: expired,
// unmounted, another master) puts the value again the two-call way, so
// such a failure costs time, never the value. Puts with preferred
// segments or another replica count than the client's default, values
// above reserveMaxBytes, and clients without a Session stream (etcd://
// master addresses) use the two calls.

const (
	reserveMaxAge   = 2 * time.Second // a reservation is written only this soon after it was granted
	reserveMaxBytes = 64 << 20        // the master's limit (server.MaxReserveBytes)
	reserveMaxSizes = 4               // value sizes held at once; the least recently put size goes first
	reservePerSize  = 16              // most reservations held of one size
	// reserveBackoff is how long the client asks for no reservation of a
	// size after the master refused one (a pool without free space:
	// reservations never evict), so a full pool costs no extra call per put.
	reserveBackoff = 250 * time.Millisecond
)

// held is one reservation the client holds.
type held struct {
	id   uint64
	size uint64
	reps []*pb.Replica
	at   time.Time // when the request that got it was sent
	gen  uint64    // session stream it was granted on
}

// resvPool is the client's reservations.
type resvPool struct {
	mu      sync.Mutex
	free    map[uint64][]held    // by size, oldest first
	last    map[uint64]time.Time // last put of each size held
	asking  map[uint64]bool      // a background request for the size runs
	denied  map[uint64]time.Time // no request for the size before then (reserveBackoff)
	release []uint64             // to give back with the next request
}

func (p *resvPool) init() {
	if p.free == nil {
		p.free, p.last, p.asking = map[uint64][]held{}, map[uint64]time.Time{}, map[uint64]bool{}
		p.denied = map[uint64]time.Time{}
	}
}

// granted keeps the reservations of resp (answering a request for sizes,
// sent at sent on stream gen) and backs off the sizes refused. Caller
// holds p.mu.
func (p *resvPool) granted(sizes []uint64, resp *pb.PutCommitResponse, sent time.Time, gen uint64) {
	p.init()
	for i, r := range resp.Reserved {
		switch {
		case statusErr(r.Status) == nil && r.Id != 0:
			p.add(held{id: r.Id, size: r.Size, reps: r.Replicas, at: sent, gen: gen})
		case i < len(sizes):
			p.denied[sizes[i]] = time.Now().Add(reserveBackoff)
		}
	}
}

// take returns a fresh reservation of size (granted on stream gen),
// queueing the stale ones it meets for release. Caller holds p.mu.
func (p *resvPool) take(size uint64, now time.Time, gen uint64) (held, bool) {
	p.init()
	p.last[size] = now
	hs := p.free[size]
	for len(hs) > 0 {
		h := hs[0]
		hs = hs[1:]
		if h.gen == gen && gen != 0 && now.Sub(h.at) < reserveMaxAge {
			p.free[size] = hs
			return h, true
		}
		p.release = append(p.release, h.id)
	}
	delete(p.free, size)
	return held{}, false
}

// add keeps h, or queues it for release when the pool is full. Caller
// holds p.mu.
func (p *resvPool) add(h held) {
	p.init()
	if _, ok := p.free[h.size]; !ok && len(p.free) >= reserveMaxSizes {
		var lru uint64
		first := true
		for sz := range p.free {
			if first || p.last[sz].Before(p.last[lru]) {
				lru, first = sz, false
			}
		}
		for _, o := range p.free[lru] {
			p.release = append(p.release, o.id)
		}
		delete(p.free, lru)
		delete(p.last, lru)
	}
	if len(p.free[h.size]) >= reservePerSize {
		p.release = append(p.release, h.id)
		return
	}
	p.free[h.size] = append(p.free[h.size], h)
	if _, ok := p.last[h.size]; !ok {
		p.last[h.size] = h.at
	}
}

// takeReleases returns and clears the ids queued for release. Caller
// holds p.mu.
func (p *resvPool) takeReleases() []uint64 {
	r := p.release
	p.release = nil
	return r
}

// reservable reports whether a put with opts may use reservations.
func (c *Client) reservable(opts *PutOptions) bool {
	if c.cfg.PutReservations < 0 {
		return false
	}
	if opts == nil {
		return true
	}
	return opts.PreferredSegment == "" && len(opts.PreferredSegments) == 0 && (opts.ReplicaNum <= 0 || opts.ReplicaNum == c.cfg.ReplicaNum)
}

// putReserved puts keys through reservations where the client holds one
// of the value's size, and the rest the two-call way. Results as
// BatchPutFromParts.
func (c *Client) putReserved(ctx context.Context, keys []string, parts [][][]byte, sizes []uint64, opts *PutOptions) []error {
	errs := make([]error, len(keys))
	now := time.Now()
	gen := c.sess.generation()
	res := make([]held, len(keys))
	var fast, slow []int
	missing := map[uint64]int{}
	c.resv.mu.Lock()
	for i, sz := range sizes {
		if sz == 0 || sz > reserveMaxBytes {
			slow = append(slow, i)
			continue
		}
		if h, ok := c.resv.take(sz, now, gen); ok {
			res[i] = h
			fast = append(fast, i)
			continue
		}
		slow = append(slow, i)
		missing[sz]++
	}
	c.resv.mu.Unlock()
	c.putSubset(ctx, keys, parts, sizes, opts, slow, errs)
	if len(missing) > 0 {
		// After the puts took their space, so that reservations take
		// what is left, never what a put of now needs.
		c.refill(missing)
	}
	if len(fast) > 0 {
		redo := c.commitReserved(ctx, keys, parts, sizes, opts, fast, res, errs)
		c.putSubset(ctx, keys, parts, sizes, opts, redo, errs)
	}
	return errs
}

// putSubset puts the keys idx the two-call way and sets their errs.
func (c *Client) putSubset(ctx context.Context, keys []string, parts [][][]byte, sizes []uint64, opts *PutOptions, idx []int, errs []error) {
	if len(idx) == 0 {
		return
	}
	if len(idx) == len(keys) {
		copy(errs, c.putStartEnd(ctx, keys, parts, sizes, opts))
		return
	}
	ks, ps, ss := make([]string, len(idx)), make([][][]byte, len(idx)), make([]uint64, len(idx))
	for j, i := range idx {
		ks[j], ps[j], ss[j] = keys[i], parts[i], sizes[i]
	}
	for j, e := range c.putStartEnd(ctx, ks, ps, ss, opts) {
		errs[idx[j]] = e
	}
}

// commitReserved writes the values idx into their reservations res[i]
// and commits them in one call that also asks for as many new
// reservations. By default the call is a precommit sent as the write
// starts, so that the write and the master round trip overlap (see
// storepb.PutCommitRequest.precommit): once both are done the keys whose
// write succeeded are sealed with a PutEnd sent before the put returns
// (its answer is awaited in the background), and those whose write
// failed are revoked. With Config.SerialCommit the call goes after the
// write and names only the values written. It sets errs for the keys it
// settles and returns the keys to put again the two-call way (write or
// commit failed).
func (c *Client) commitReserved(ctx context.Context, keys []string, parts [][][]byte, sizes []uint64, opts *PutOptions, idx []int, res []held, errs []error) (redo []int) {
	sg := stagesOf(ctx)
	t0 := time.Now()
	type write struct{ key, first, n int }
	var (
		reqs    []transfer.Request
		writes  []write
		release []uint64
	)
	for _, i := range idx {
		first := len(reqs)
		ok := true
		for _, rep := range res[i].reps {
			rs, err := c.transferReqs(ctx, transfer.Write, rep, parts[i])
			if err != nil {
				ok = false
				break
			}
			reqs = append(reqs, rs...)
		}
		if !ok {
			reqs = reqs[:first]
			redo, release = append(redo, i), append(release, res[i].id)
			continue
		}
		writes = append(writes, write{key: i, first: first, n: len(reqs) - first})
	}
	precommit := !c.cfg.SerialCommit

	rc := c.replicaConfig(opts)
	in := &pb.PutCommitRequest{ClientId: c.id, Config: rc, Precommit: precommit}
	var committed []int
	want := map[uint64]int{}
	// New reservations are asked for only while the client is open, and
	// the call counts in c.bg, so Close, which waits for c.bg before
	// giving every reservation back, also gives back those it brings.
	c.mu.Lock()
	refill := !c.mu.closed
	if refill {
		c.bg.Add(1)
	}
	c.mu.Unlock()
	if refill {
		defer c.bg.Done()
	}
	// commitOf adds the keys of writes that ok accepts to the call, and
	// settles the others (their reservation is released).
	var wrote map[int]bool // precommit: key index -> its write succeeded
	commitOf := func(ok func(w write) bool) {
		c.resv.mu.Lock()
		defer c.resv.mu.Unlock()
		for _, w := range writes {
			i := w.key
			if !ok(w) {
				release = append(release, res[i].id)
				if ctx.Err() != nil {
					errs[i] = store.Errorf(store.TransferFail, "key %q: %v", keys[i], ctx.Err())
				} else {
					redo = append(redo, i)
				}
				continue
			}
			in.Reservations = append(in.Reservations, res[i].id)
			in.Keys = append(in.Keys, []byte(keys[i]))
			in.Sizes = append(in.Sizes, sizes[i])
			if refill && len(c.resv.free[sizes[i]])+want[sizes[i]] < max(c.cfg.PutReservations, 1) {
				want[sizes[i]]++
				in.ReserveSizes = append(in.ReserveSizes, sizes[i])
			}
			committed = append(committed, i)
		}
		in.Release = append(release, c.resv.takeReleases()...)
	}
	written := func(st []transfer.TaskStatus, terr error) func(w write) bool {
		return func(w write) bool {
			ok := terr == nil
			for j := w.first; ok && j < w.first+w.n; j++ {
				ok = st[j].Status == transfer.StatusCompleted
			}
			return ok
		}
	}

	var (
		resp *pb.PutCommitResponse
		err  error
		sent time.Time
	)
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	t0 = sg.restart(t0)
	if precommit {
		commitOf(func(write) bool { return true })
		if len(in.Keys) == 0 && len(in.Release) == 0 {
			return redo
		}
		in.SealKeys = c.seals.take(c)
		type answer struct {
			resp *pb.PutCommitResponse
			err  error
		}
		ch := make(chan answer, 1)
		sent = time.Now()
		go func() {
			r, e := c.batchPutCommit(rctx, in)
			ch <- answer{r, e}
		}()
		st, terr := c.run(ctx, reqs)
		t0 = sg.since(StageWrite, t0)
		ok := written(st, terr)
		wrote = make(map[int]bool, len(writes))
		for _, w := range writes {
			wrote[w.key] = ok(w)
		}
		a := <-ch
		resp, err = a.resp, a.err
	} else {
		st, terr := c.run(ctx, reqs)
		t0 = sg.since(StageWrite, t0)
		commitOf(written(st, terr))
		if len(in.Keys) == 0 && len(in.Release) == 0 {
			return redo
		}
		sent = time.Now()
		resp, err = c.batchPutCommit(rctx, in)
	}
	gen := c.sess.generation()
	sg.since(StagePutEnd, t0)
	if err == nil && len(resp.Results) != len(in.Keys) {
		err = errors.New("answer carries a wrong number of results")
	}
	if err != nil && len(in.SealKeys) > 0 {
		c.queueSeals(in.SealKeys) // PutEnd again: a no-op if it was done
	}
	if err != nil {
		// Whether the keys were committed is unknown. A precommitted key
		// would wait for a PutEnd that never comes: revoke them (a key
		// not committed answers OBJECT_NOT_FOUND there), then put them
		// again (an existing key is a success there).
		if precommit {
			c.revoke(committed, keys)
		}
		if ctx.Err() != nil {
			for _, i := range committed {
				errs[i] = rpcErr("put commit", err)
			}
			return redo
		}
		return append(redo, committed...)
	}
	asked := int(rc.ReplicaNum)
	var partial, seal, revoke []int
	c.resv.mu.Lock()
	for j, i := range committed {
		e := statusErr(resp.Results[j])
		switch {
		case e == nil && precommit && !wrote[i]:
			// Precommitted, but the value did not arrive.
			revoke = append(revoke, i)
		case e == nil:
			seal = append(seal, i)
			if len(res[i].reps) < asked {
				partial = append(partial, i)
			}
		case errors.Is(e, store.ErrObjectAlreadyExists):
			// Upstream: a no-op success. The reservation is unchanged.
			c.resv.add(res[i])
		case errors.Is(e, store.ErrInvalidKey), errors.Is(e, store.ErrInvalidParams):
			errs[i] = e
			c.resv.add(res[i]) // refused before it was touched
		default:
			redo = append(redo, i)
		}
	}
	c.resv.granted(in.ReserveSizes, resp, sent, gen)
	c.resv.mu.Unlock()
	if precommit {
		// A seal the master was asked to make durable and that failed
		// (say, leadership lost before it was replicated) is put again.
		redo = append(redo, c.seal(seal, keys, resp.AwaitSeal)...)
		if len(revoke) > 0 {
			c.revoke(revoke, keys)
			for _, i := range revoke {
				if ctx.Err() != nil {
					errs[i] = store.Errorf(store.TransferFail, "key %q: %v", keys[i], ctx.Err())
				} else {
					redo = append(redo, i)
				}
			}
		}
	}
	if opts != nil && opts.OnPartial != nil {
		for _, i := range partial {
			opts.OnPartial(keys[i], len(res[i].reps), asked)
		}
	}
	return redo
}

// seal ends the precommitted writes idx, whose values are written. With
// wait (the master asked for it: an HA one) it sends their PutEnd and
// waits for the answer, returning the keys whose seal failed (to put
// again); else it queues them (queueSeals) and returns nil.
func (c *Client) seal(idx []int, keys []string, wait bool) (failed []int) {
	if len(idx) == 0 {
		return nil
	}
	ks := make([][]byte, len(idx))
	for j, i := range idx {
		ks[j] = []byte(keys[i])
	}
	if !wait {
		c.queueSeals(ks)
		return nil
	}
	st := c.sendSeals(ks)
	for j, i := range idx {
		if st == nil || len(st.Results) != len(idx) || statusErr(st.Results[j]) != nil {
			failed = append(failed, i)
		}
	}
	return failed
}

// sealDelay is how long a queued seal waits for the client's next commit
// to carry it (PutCommitRequest.seal_keys) before it goes out in a call
// of its own: a client putting back to back sends its next commit within
// microseconds, and a reader of the key waits at the master that much
// longer at most.
var sealDelay = 200 * time.Microsecond // var: tests lengthen it

// sealQueue holds the keys of precommitted writes whose PutEnd is still
// to be sent; see queueSeals.
type sealQueue struct {
	mu    sync.Mutex
	keys  [][]byte
	timer *time.Timer // armed while keys wait; its run counts in Client.bg
}

// take returns the queued keys for a commit to carry, disarming the
// timer. Safe on a nil queue's zero value.
func (q *sealQueue) take(c *Client) [][]byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	ks := q.keys
	q.keys = nil
	if q.timer != nil && q.timer.Stop() {
		c.bg.Done() // the stopped run will not
	}
	q.timer = nil
	return ks
}

// queueSeals queues the PutEnd of keys: the client's next commit within
// sealDelay carries it, else a call of its own sends it (counted in
// c.bg, so Close waits for it). After Close began it is sent here.
func (c *Client) queueSeals(keys [][]byte) {
	c.mu.Lock()
	closed := c.mu.closed
	q := &c.seals
	q.mu.Lock()
	if closed {
		q.mu.Unlock()
		c.mu.Unlock()
		c.sendSeals(keys)
		return
	}
	q.keys = append(q.keys, keys...)
	if q.timer == nil {
		c.bg.Add(1)
		q.timer = time.AfterFunc(sealDelay, func() {
			defer c.bg.Done()
			q.mu.Lock()
			ks := q.keys
			q.keys, q.timer = nil, nil
			q.mu.Unlock()
			if len(ks) > 0 {
				c.sendSeals(ks)
			}
		})
	}
	q.mu.Unlock()
	c.mu.Unlock()
}

// flushSeals sends the queued seals now and waits for the answer (Close).
func (c *Client) flushSeals() {
	if ks := c.seals.take(c); len(ks) > 0 {
		c.sendSeals(ks)
	}
}

// sendSeals sends the PutEnd of keys over the session (once more as the
// unary call if that fails) and returns the answer, nil when both failed;
// a master that never gets it drops the writes as it drops any
// unfinished one.
func (c *Client) sendSeals(keys [][]byte) *pb.StatusList {
	in := &pb.KeysRequest{ClientId: c.id, Keys: keys}
	ctx, cancel := c.rpcCtx(context.Background())
	defer cancel()
	st, err := c.batchPutEnd(ctx, in)
	if err != nil && ctx.Err() == nil {
		st, err = c.rpc.BatchPutEnd(ctx, in)
	}
	if err != nil {
		return nil
	}
	return st
}

// revoke drops the precommitted writes idx (their values did not all
// arrive, or the commit's answer was lost), waiting for the answer, so
// that putting them again finds no write in progress. It is sent even
// when the put's context has ended (a cancelled put), bounded by the
// RPC timeout and cleanupTimeout, so that no reader waits for a seal
// that never comes.
func (c *Client) revoke(idx []int, keys []string) {
	if len(idx) == 0 {
		return
	}
	in := &pb.KeysRequest{ClientId: c.id, Keys: make([][]byte, len(idx))}
	for j, i := range idx {
		in.Keys[j] = []byte(keys[i])
	}
	rctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.RPCTimeout, cleanupTimeout))
	defer cancel()
	_, _ = c.batchPutRevoke(rctx, in)
}

// refill asks the master in the background for reservations of the
// sizes puts missed (missing: size -> keys), up to PutReservations per
// size (or as many as one put needed, at most reservePerSize), one
// request per size at a time. It also gives back the reservations
// queued for release.
func (c *Client) refill(missing map[uint64]int) {
	var sizes []uint64
	c.resv.mu.Lock()
	c.resv.init()
	now := time.Now()
	for sz, n := range missing {
		if c.resv.asking[sz] || now.Before(c.resv.denied[sz]) {
			continue
		}
		want := min(max(n, c.cfg.PutReservations), reservePerSize) - len(c.resv.free[sz])
		for ; want > 0; want-- {
			sizes = append(sizes, sz)
		}
		if len(sizes) > 0 && sizes[len(sizes)-1] == sz {
			c.resv.asking[sz] = true
		}
	}
	release := c.resv.takeReleases()
	c.resv.mu.Unlock()
	if len(sizes) == 0 && len(release) == 0 {
		return
	}
	done := func() {
		c.resv.mu.Lock()
		for _, sz := range sizes {
			delete(c.resv.asking, sz)
		}
		c.resv.mu.Unlock()
	}
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		done()
		return
	}
	c.bg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.bg.Done()
		defer done()
		ctx, cancel := c.rpcCtx(context.Background())
		defer cancel()
		sent := time.Now()
		resp, err := c.batchPutCommit(ctx, &pb.PutCommitRequest{ClientId: c.id, Config: c.replicaConfig(nil), ReserveSizes: sizes, Release: release})
		if err != nil {
			return // the master takes the released ones over with its TTL
		}
		gen := c.sess.generation()
		c.resv.mu.Lock()
		defer c.resv.mu.Unlock()
		c.resv.granted(sizes, resp, sent, gen)
	}()
}

// releaseReservations gives every reservation back (Close), best effort:
// the master takes over the ones it does not hear of with its TTL.
func (c *Client) releaseReservations() {
	c.resv.mu.Lock()
	ids := c.resv.takeReleases()
	for _, hs := range c.resv.free {
		for _, h := range hs {
			ids = append(ids, h.id)
		}
	}
	c.resv.free = nil
	c.resv.last, c.resv.asking, c.resv.denied = nil, nil, nil
	c.resv.mu.Unlock()
	if len(ids) == 0 || c.sess == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.RPCTimeout, cleanupTimeout))
	defer cancel()
	_, _ = c.batchPutCommit(ctx, &pb.PutCommitRequest{ClientId: c.id, Release: ids})
}

// Reservations is how many reservations the client holds (space at the
// master for its next puts, see PutReservations), over all value sizes.
func (c *Client) Reservations() int {
	c.resv.mu.Lock()
	defer c.resv.mu.Unlock()
	n := 0
	for _, hs := range c.resv.free {
		n += len(hs)
	}
	return n
}
