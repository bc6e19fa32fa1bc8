package writepolicy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// fakePool is an in-memory pool: an Exister and a StoreFunc over a key
// set, with injected per-key store failures and an injected Exister error.
// It records every call.
type fakePool struct {
	mu        sync.Mutex
	present   map[string]bool
	failKeys  map[string]bool
	existErr  error
	existCall [][]string
	storeCall [][]string
	stored    map[string]int // key -> times a Store call succeeded for it
}

func newFakePool(present ...string) *fakePool {
	p := &fakePool{present: map[string]bool{}, failKeys: map[string]bool{}, stored: map[string]int{}}
	for _, k := range present {
		p.present[k] = true
	}
	return p
}

func (p *fakePool) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.existCall = append(p.existCall, slices.Clone(keys))
	if p.existErr != nil {
		return nil, p.existErr
	}
	out := make([]bool, len(keys))
	for i, k := range keys {
		out[i] = p.present[k]
	}
	return out, nil
}

func (p *fakePool) store(ctx context.Context, keys []string, blocks []int) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.storeCall = append(p.storeCall, slices.Clone(keys))
	errs := make([]error, len(keys))
	for i, k := range keys {
		if p.failKeys[k] {
			errs[i] = fmt.Errorf("store %s: injected failure", k)
			continue
		}
		p.present[k] = true
		p.stored[k]++
	}
	return errs
}

// doneLog records OnDone calls.
type doneLog struct {
	mu  sync.Mutex
	got []string
}

func (d *doneLog) fn(key string, block int, o Outcome) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, fmt.Sprintf("%s:%d:%v", key, block, o))
}

func (d *doneLog) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.got
	d.got = nil
	return out
}

func newWriter(t *testing.T, cfg Config[int], pool *fakePool, log *doneLog) *Writer[int] {
	t.Helper()
	cfg.Store = pool.store
	if cfg.Exister == nil {
		cfg.Exister = pool
	}
	cfg.OnDone = log.fn
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestPolicies runs a script of operations per policy; each step names
// the call and the outcome (Offer/OnEvict) or handled count (Flush) and
// blocks released (OnDone) it must produce.
func TestPolicies(t *testing.T) {
	type step struct {
		op   string // "offer", "evict", "flush"
		key  string
		want any // Outcome for offer/evict, int for flush
		done []string
	}
	tests := []struct {
		name    string
		policy  Policy
		present []string
		steps   []step
		stored  []string
		want    Counters
	}{
		{
			name:    "write-through stores every new block once",
			policy:  WriteThrough,
			present: []string{"p"},
			steps: []step{
				{"offer", "a", Queued, nil},
				{"offer", "a", Skipped, nil}, // already queued
				{"offer", "p", Queued, nil},  // in the pool, but the Writer does not know yet
				{"flush", "", 2, []string{"a:0:stored", "p:0:skipped"}},
				{"offer", "a", Skipped, nil}, // recently stored: no I/O
				{"offer", "p", Skipped, nil}, // recently found
				{"flush", "", 0, nil},
				{"evict", "a", Ignored, nil},
			},
			stored: []string{"a"},
			want:   Counters{Offered: 5, Evicted: 1, Queued: 2, Stored: 1, DedupSkipped: 4},
		},
		{
			name:   "write-through-selective stores on the second hit",
			policy: WriteThroughSelective,
			steps: []step{
				{"offer", "a", Deferred, nil},
				{"offer", "b", Deferred, nil},
				{"flush", "", 0, nil},
				{"offer", "a", Queued, nil},
				{"offer", "a", Skipped, nil},
				{"flush", "", 1, []string{"a:0:stored"}},
				{"offer", "a", Skipped, nil},
				{"offer", "c", Deferred, nil},
			},
			stored: []string{"a"},
			want:   Counters{Offered: 6, Queued: 1, Stored: 1, DedupSkipped: 2, FirstHitDeferred: 3},
		},
		{
			name:    "write-back stores on eviction only",
			policy:  WriteBack,
			present: []string{"p"},
			steps: []step{
				{"offer", "a", Tracked, nil},
				{"offer", "a", Skipped, nil},
				{"offer", "b", Tracked, nil},
				{"offer", "p", Tracked, nil},
				{"flush", "", 0, nil},
				{"evict", "x", Ignored, nil},
				{"evict", "a", Queued, nil},
				{"evict", "p", Queued, nil},
				{"evict", "a", Ignored, nil},
				{"flush", "", 2, []string{"a:0:stored", "p:0:skipped"}},
				{"offer", "a", Skipped, nil},
			},
			stored: []string{"a"},
			want:   Counters{Offered: 5, Evicted: 4, Queued: 2, Stored: 1, DedupSkipped: 3, Tracked: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := newFakePool(tt.present...)
			log := &doneLog{}
			w := newWriter(t, Config[int]{Policy: tt.policy}, pool, log)
			for i, s := range tt.steps {
				var got any
				switch s.op {
				case "offer":
					got = w.Offer(s.key, 0)
				case "evict":
					got = w.OnEvict(s.key)
				case "flush":
					got = w.Flush(t.Context())
				}
				if got != s.want {
					t.Fatalf("step %d %s(%q) = %v, want %v", i, s.op, s.key, got, s.want)
				}
				if d := log.take(); !slices.Equal(d, s.done) {
					t.Fatalf("step %d %s(%q): OnDone %v, want %v", i, s.op, s.key, d, s.done)
				}
			}
			var stored []string
			for k := range pool.stored {
				stored = append(stored, k)
			}
			slices.Sort(stored)
			if !slices.Equal(stored, tt.stored) {
				t.Errorf("stored %v, want %v", stored, tt.stored)
			}
			if got := w.Stats(); got != tt.want {
				t.Errorf("counters\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestQueueFullDropsWithoutBlocking(t *testing.T) {
	pool := newFakePool()
	log := &doneLog{}
	w := newWriter(t, Config[int]{QueueSize: 2}, pool, log)
	for i, want := range []Outcome{Queued, Queued, Dropped, Dropped} {
		if got := w.Offer(fmt.Sprint("k", i), i); got != want {
			t.Fatalf("Offer %d = %v, want %v", i, got, want)
		}
	}
	if got := w.Flush(t.Context()); got != 2 {
		t.Fatalf("Flush = %d", got)
	}
	if got := w.Offer("k2", 2); got != Queued { // a dropped key may come back
		t.Fatalf("re-Offer of a dropped key = %v", got)
	}
	c := w.Stats()
	if c.DroppedFull != 2 || c.Queued != 3 || c.Stored != 2 {
		t.Fatalf("counters %+v", c)
	}

	// WriteBack: a full tracked set drops at Offer; a full queue drops at
	// OnEvict and releases the block.
	wb := newWriter(t, Config[int]{Policy: WriteBack, QueueSize: 1, TrackSize: 2}, pool, log)
	for i, want := range []Outcome{Tracked, Tracked, Dropped} {
		if got := wb.Offer(fmt.Sprint("b", i), i); got != want {
			t.Fatalf("write-back Offer %d = %v, want %v", i, got, want)
		}
	}
	log.take()
	if got := wb.OnEvict("b0"); got != Queued {
		t.Fatalf("OnEvict(b0) = %v", got)
	}
	if got := wb.OnEvict("b1"); got != Dropped {
		t.Fatalf("OnEvict(b1) on a full queue = %v", got)
	}
	if d := log.take(); !slices.Equal(d, []string{"b1:1:dropped"}) {
		t.Fatalf("OnDone %v", d)
	}
	if c := wb.Stats(); c.DroppedFull != 2 || c.Tracked != 2 || c.Queued != 1 {
		t.Fatalf("write-back counters %+v", c)
	}
}

func TestDedupAndFailures(t *testing.T) {
	t.Run("exister hit skips the store", func(t *testing.T) {
		pool := newFakePool("b")
		w := newWriter(t, Config[int]{}, pool, &doneLog{})
		w.Offer("a", 1)
		w.Offer("b", 2)
		w.Flush(t.Context())
		if !slices.Equal(pool.storeCall[0], []string{"a"}) || len(pool.existCall) != 1 {
			t.Fatalf("exist calls %v, store calls %v", pool.existCall, pool.storeCall)
		}
	})
	t.Run("exister error stores unchecked", func(t *testing.T) {
		pool := newFakePool("b")
		pool.existErr = errors.New("master down")
		w := newWriter(t, Config[int]{}, pool, &doneLog{})
		w.Offer("a", 1)
		w.Offer("b", 2)
		w.Flush(t.Context())
		c := w.Stats()
		if c.ExistErrors != 1 || c.Stored != 2 || len(pool.storeCall) != 1 {
			t.Fatalf("counters %+v, store calls %v", c, pool.storeCall)
		}
	})
	t.Run("no exister", func(t *testing.T) {
		pool := newFakePool("b")
		w, err := New(Config[int]{Store: pool.store})
		if err != nil {
			t.Fatal(err)
		}
		w.Offer("b", 2)
		w.Flush(t.Context())
		if len(pool.existCall) != 0 || w.Stats().Stored != 1 {
			t.Fatalf("exist calls %v, counters %+v", pool.existCall, w.Stats())
		}
	})
	t.Run("failed store is counted and may be retried by a later offer", func(t *testing.T) {
		pool := newFakePool()
		pool.failKeys["a"] = true
		log := &doneLog{}
		w := newWriter(t, Config[int]{}, pool, log)
		w.Offer("a", 1)
		w.Offer("b", 2)
		w.Flush(t.Context())
		if d := log.take(); !slices.Equal(d, []string{"a:1:failed", "b:2:stored"}) {
			t.Fatalf("OnDone %v", d)
		}
		delete(pool.failKeys, "a")
		if got := w.Offer("a", 1); got != Queued {
			t.Fatalf("re-Offer after a failure = %v", got)
		}
		w.Flush(t.Context())
		if c := w.Stats(); c.Failed != 1 || c.Stored != 2 {
			t.Fatalf("counters %+v", c)
		}
	})
	t.Run("store answering the wrong length fails the batch", func(t *testing.T) {
		short := func(ctx context.Context, keys []string, blocks []int) []error { return nil }
		w, err := New(Config[int]{Store: short})
		if err != nil {
			t.Fatal(err)
		}
		w.Offer("a", 1)
		w.Flush(t.Context())
		if c := w.Stats(); c.Failed != 1 || c.Stored != 0 {
			t.Fatalf("counters %+v", c)
		}
	})
	t.Run("recent set is bounded", func(t *testing.T) {
		pool := newFakePool()
		w := newWriter(t, Config[int]{RecentSize: 2}, pool, &doneLog{})
		for _, k := range []string{"a", "b", "c"} {
			w.Offer(k, 0)
		}
		w.Flush(t.Context())
		// "a" was forgotten: re-offering it costs an existence check, not
		// a second store.
		if got := w.Offer("a", 0); got != Queued {
			t.Fatalf("Offer of a forgotten key = %v", got)
		}
		if got := w.Offer("c", 0); got != Skipped {
			t.Fatalf("Offer of a remembered key = %v", got)
		}
		w.Flush(t.Context())
		if pool.stored["a"] != 1 || w.Stats().DedupSkipped != 2 {
			t.Fatalf("stored %v, counters %+v", pool.stored, w.Stats())
		}
	})
}

func TestFlushBatches(t *testing.T) {
	pool := newFakePool()
	w := newWriter(t, Config[int]{BatchSize: 2}, pool, &doneLog{})
	for i := range 5 {
		w.Offer(fmt.Sprint(i), i)
	}
	var got []int
	for {
		n := w.Flush(t.Context())
		got = append(got, n)
		if n == 0 {
			break
		}
	}
	if !slices.Equal(got, []int{2, 2, 1, 0}) {
		t.Fatalf("Flush handled %v", got)
	}
	want := [][]string{{"0", "1"}, {"2", "3"}, {"4"}}
	for i := range want {
		if !slices.Equal(pool.storeCall[i], want[i]) {
			t.Fatalf("store calls %v, want %v (FIFO)", pool.storeCall, want)
		}
	}
}

// TestPolicyProperties offers, evicts and flushes a seeded random
// sequence and checks each policy against its definition: which keys end
// up stored, that no key is stored twice, that every held block is
// released exactly once, and that the counters balance.
func TestPolicyProperties(t *testing.T) {
	for _, policy := range []Policy{WriteThrough, WriteThroughSelective, WriteBack} {
		for seed := uint64(1); seed <= 20; seed++ {
			t.Run(fmt.Sprintf("%v/seed%d", policy, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(policy)))
				const nkeys = 12
				var present []string
				for k := range nkeys {
					if rng.IntN(4) == 0 {
						present = append(present, fmt.Sprint("k", k))
					}
				}
				pool := newFakePool(present...)
				inPool := map[string]bool{}
				for _, k := range present {
					inPool[k] = true
				}
				held := map[string]int{} // key -> blocks held and not released
				var heldTotal, released int
				cfg := Config[int]{Policy: policy, BatchSize: 1 + rng.IntN(4), Store: pool.store, Exister: pool}
				tally := map[Outcome]uint64{} // returned by Offer and OnEvict
				doneTally := map[Outcome]uint64{}
				cfg.OnDone = func(key string, block int, o Outcome) {
					doneTally[o]++
					held[key]--
					released++
					if held[key] < 0 {
						t.Errorf("%s released twice", key)
					}
				}
				w, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				offers := map[string]int{}
				evictedAfterOffer := map[string]bool{}
				var nOffer, nEvict int
				for range 200 {
					k := fmt.Sprint("k", rng.IntN(nkeys))
					switch r := rng.IntN(10); {
					case r < 6:
						nOffer++
						offers[k]++
						o := w.Offer(k, 0)
						tally[o]++
						if o == Queued || o == Tracked {
							held[k]++
							heldTotal++
						}
					case r < 8:
						nEvict++
						if offers[k] > 0 {
							evictedAfterOffer[k] = true
						}
						tally[w.OnEvict(k)]++ // a tracked block moves to the queue: still one hold
					default:
						w.Flush(t.Context())
					}
				}
				for w.Flush(t.Context()) > 0 {
				}
				w.Discard()

				want := map[string]bool{}
				for k, n := range offers {
					if inPool[k] {
						continue
					}
					switch policy {
					case WriteThrough:
						want[k] = n >= 1
					case WriteThroughSelective:
						want[k] = n >= 2
					case WriteBack:
						want[k] = evictedAfterOffer[k]
					}
				}
				for k := range nkeys {
					key := fmt.Sprint("k", k)
					if got := pool.stored[key]; got > 1 || (got == 1) != want[key] {
						t.Errorf("%s stored %d times, want stored=%v (offers %d, evicted after offer %v, in pool %v)",
							key, got, want[key], offers[key], evictedAfterOffer[key], inPool[key])
					}
				}
				c := w.Stats()
				if c.Offered != uint64(nOffer) || c.Evicted != uint64(nEvict) {
					t.Errorf("offered %d evicted %d, want %d %d", c.Offered, c.Evicted, nOffer, nEvict)
				}
				if released != heldTotal {
					t.Errorf("released %d of %d held blocks", released, heldTotal)
				}
				if c.Queued != tally[Queued] || c.Tracked != tally[Tracked] || c.FirstHitDeferred != tally[Deferred] ||
					c.DroppedFull != tally[Dropped] || c.DedupSkipped != tally[Skipped]+doneTally[Skipped] ||
					c.Queued != c.Stored+c.Failed+doneTally[Skipped] || c.Discarded != doneTally[Discarded] {
					t.Errorf("counters %+v do not balance: returned %v, released %v", c, tally, doneTally)
				}
				if c.Stored != uint64(len(pool.stored)) || c.Failed != 0 {
					t.Errorf("counters %+v, pool stored %d", c, len(pool.stored))
				}
				if q, tr := w.Len(); q != 0 || tr != 0 {
					t.Errorf("after flush and discard: %d queued, %d tracked", q, tr)
				}
			})
		}
	}
}

func TestRun(t *testing.T) {
	pool := newFakePool()
	stored := make(chan string, 8)
	w, err := New(Config[int]{Store: pool.store, Exister: pool, OnDone: func(k string, _ int, o Outcome) {
		if o == Stored {
			stored <- k
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	for _, k := range []string{"a", "b", "c"} {
		w.Offer(k, 0)
	}
	got := []string{<-stored, <-stored, <-stored}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("stored %v", got)
	}
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
}

func TestDiscard(t *testing.T) {
	pool := newFakePool()
	log := &doneLog{}
	w := newWriter(t, Config[int]{Policy: WriteBack}, pool, log)
	w.Offer("a", 1)
	w.Offer("b", 2)
	w.OnEvict("b")
	if n := w.Discard(); n != 2 {
		t.Fatalf("Discard = %d", n)
	}
	d := log.take()
	slices.Sort(d)
	if !slices.Equal(d, []string{"a:1:discarded", "b:2:discarded"}) {
		t.Fatalf("OnDone %v", d)
	}
	if w.Flush(t.Context()) != 0 || w.Stats().Discarded != 2 {
		t.Fatalf("after Discard: counters %+v", w.Stats())
	}
	if got := w.Offer("b", 2); got != Tracked {
		t.Fatalf("Offer after Discard = %v", got)
	}
}

func TestConfigAndNames(t *testing.T) {
	store := func(context.Context, []string, []int) []error { return nil }
	tests := []struct {
		name string
		cfg  Config[int]
		ok   bool
	}{
		{"defaults", Config[int]{Store: store}, true},
		{"no store", Config[int]{}, false},
		{"bad policy", Config[int]{Store: store, Policy: 7}, false},
		{"negative queue", Config[int]{Store: store, QueueSize: -1}, false},
		{"negative timeout", Config[int]{Store: store, Timeout: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
				t.Fatalf("New = %v, want ok=%v", err, tt.ok)
			}
		})
	}
	for _, p := range []Policy{WriteThrough, WriteThroughSelective, WriteBack} {
		if got, err := ParsePolicy(p.String()); err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParsePolicy("write_around"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ParsePolicy(write_around) = %v", err)
	}
	if Policy(9).String() != "Policy(9)" || Stored.String() != "stored" || Outcome(0).String() != "Outcome(0)" {
		t.Error("String forms")
	}
}

// TestFIFOSet checks the bounded set against a naive reference: a list of
// keys in insertion order (re-adding moves a key to the back).
func TestFIFOSet(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		max := 1 + rng.IntN(6)
		s := newFIFOSet(max)
		var ref []string
		for i := range 2000 {
			k := fmt.Sprint(rng.IntN(12))
			if rng.IntN(4) == 0 {
				s.remove(k)
				ref = slices.DeleteFunc(ref, func(x string) bool { return x == k })
			} else {
				s.add(k)
				ref = slices.DeleteFunc(ref, func(x string) bool { return x == k })
				ref = append(ref, k)
				if len(ref) > max {
					ref = ref[len(ref)-max:]
				}
			}
			for j := range 12 {
				k := fmt.Sprint(j)
				if s.has(k) != slices.Contains(ref, k) {
					t.Fatalf("seed %d op %d: has(%s) = %v, reference %v", seed, i, k, s.has(k), ref)
				}
			}
			if len(s.ring) > 4*max+34 {
				t.Fatalf("ring grew to %d for max %d", len(s.ring), max)
			}
		}
	}
}
