package writepolicy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/core/kvpool"
)

// ErrInvalidConfig is matched by every Config.Validate error.
var ErrInvalidConfig = errors.New("writepolicy: invalid config")

// Policy chooses when an offered block is stored.
type Policy int

// The write policies; the names are SGLang's --hicache-write-policy values.
const (
	// WriteThrough stores every offered block (the zero value).
	WriteThrough Policy = iota
	// WriteThroughSelective stores a block on its second Offer.
	WriteThroughSelective
	// WriteBack stores a block when the engine evicts it (OnEvict).
	WriteBack
)

var policyNames = [...]string{"write_through", "write_through_selective", "write_back"}

// String returns the policy's SGLang name.
func (p Policy) String() string {
	if p >= 0 && int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// ParsePolicy parses an SGLang policy name ("write_through",
// "write_through_selective", "write_back").
func ParsePolicy(s string) (Policy, error) {
	for i, n := range policyNames {
		if s == n {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown write policy %q", ErrInvalidConfig, s)
}

// Outcome is what happened to an offered block.
type Outcome int

// Outcomes returned by Offer and OnEvict and passed to Config.OnDone.
const (
	// Queued: the block waits in the queue for Flush.
	Queued Outcome = iota + 1
	// Deferred: first hit under WriteThroughSelective; not held.
	Deferred
	// Tracked: held under WriteBack until OnEvict.
	Tracked
	// Skipped: the pool has (or will have) the key; not held.
	Skipped
	// Dropped: the queue or tracked set was full; not held.
	Dropped
	// Ignored: OnEvict of a key the Writer does not hold.
	Ignored
	// Stored: Flush stored the block (OnDone only).
	Stored
	// Failed: the store failed (OnDone only).
	Failed
	// Discarded: Discard let the block go (OnDone only).
	Discarded
)

var outcomeNames = [...]string{"", "queued", "deferred", "tracked", "skipped", "dropped", "ignored", "stored", "failed", "discarded"}

func (o Outcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// StoreFunc stores blocks[i] under keys[i] in one batch and returns one
// error per key (nil = stored; a key the pool already holds counts as
// stored). core/store/client's BatchPutFrom fits after gathering each
// block into registered memory.
type StoreFunc[B any] func(ctx context.Context, keys []string, blocks []B) []error

// Defaults applied by Config for zero fields.
const (
	DefaultQueueSize  = 1024
	DefaultBatchSize  = 64
	DefaultRecentSize = 1 << 16
	DefaultSeenSize   = 1 << 16
	DefaultTrackSize  = 1 << 16
	DefaultTimeout    = 30 * time.Second
)

// Config configures a Writer; zero fields take the defaults above.
type Config[B any] struct {
	// Policy is the write policy; default WriteThrough.
	Policy Policy
	// Store stores a batch; required.
	Store StoreFunc[B]
	// Exister, if set, is asked before each store which keys the pool
	// already holds; those are skipped. core/store/client.Client fits.
	Exister kvpool.Exister
	// QueueSize bounds the blocks waiting for Flush; default 1024.
	QueueSize int
	// BatchSize bounds the blocks one Flush handles; default 64.
	BatchSize int
	// RecentSize bounds the keys remembered as in the pool; default 65536.
	RecentSize int
	// SeenSize bounds the keys remembered as hit once
	// (WriteThroughSelective); default 65536.
	SeenSize int
	// TrackSize bounds the blocks held for eviction (WriteBack); default
	// 65536.
	TrackSize int
	// Timeout bounds the Exister and Store calls of one Flush; default 30s.
	Timeout time.Duration
	// OnDone, if set, is called once for every block the Writer held
	// (Offer or OnEvict returned Queued or Tracked) when it lets the block
	// go, with Stored, Skipped, Failed, Dropped or Discarded.
	OnDone func(key string, block B, o Outcome)
}

func (c Config[B]) withDefaults() Config[B] {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.QueueSize, DefaultQueueSize)
	def(&c.BatchSize, DefaultBatchSize)
	def(&c.RecentSize, DefaultRecentSize)
	def(&c.SeenSize, DefaultSeenSize)
	def(&c.TrackSize, DefaultTrackSize)
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Validate reports the first problem with c (after defaults), as an error
// matching ErrInvalidConfig.
func (c Config[B]) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Policy < WriteThrough || c.Policy > WriteBack:
		return fmt.Errorf("%w: %v", ErrInvalidConfig, c.Policy)
	case c.Store == nil:
		return fmt.Errorf("%w: nil Store", ErrInvalidConfig)
	case c.QueueSize < 1, c.BatchSize < 1, c.RecentSize < 1, c.SeenSize < 1, c.TrackSize < 1:
		return fmt.Errorf("%w: sizes must be >= 1 (queue %d, batch %d, recent %d, seen %d, track %d)",
			ErrInvalidConfig, c.QueueSize, c.BatchSize, c.RecentSize, c.SeenSize, c.TrackSize)
	case c.Timeout < 0:
		return fmt.Errorf("%w: Timeout %v, want >= 0", ErrInvalidConfig, c.Timeout)
	}
	return nil
}

// Counters are the Writer's outcome counts since it was made.
type Counters struct {
	Offered          uint64 // Offer calls
	Evicted          uint64 // OnEvict calls
	Queued           uint64 // blocks put on the queue
	Stored           uint64 // blocks stored by Flush
	DedupSkipped     uint64 // blocks not stored because the pool has or will have the key
	DroppedFull      uint64 // blocks refused: queue (or WriteBack tracked set) full
	Failed           uint64 // blocks whose store failed
	FirstHitDeferred uint64 // first hits under WriteThroughSelective
	Tracked          uint64 // blocks held for eviction under WriteBack
	Discarded        uint64 // blocks let go by Discard
	ExistErrors      uint64 // Exister calls that failed (the batch was stored unchecked)
}

// counters holds the live counts; typed atomics so Stats takes no lock.
type counters struct {
	offered, evicted, queued, stored, dedupSkipped, droppedFull, failed,
	firstHitDeferred, tracked, discarded, existErrors atomic.Uint64
}

// item is a block waiting to be stored.
type item[B any] struct {
	key   string
	block B
}

// Writer applies a write policy to an engine's blocks; see the package
// documentation.
type Writer[B any] struct {
	cfg Config[B]
	c   counters
	// notify has room for one wake-up of Run; Offer and OnEvict post to it
	// without blocking.
	notify chan struct{}

	// mu guards the fields below it; held only for in-memory work.
	mu sync.Mutex
	// queue is the FIFO of blocks waiting for Flush (len <= QueueSize).
	queue []item[B]
	// pending holds the keys queued or being flushed.
	pending map[string]struct{}
	// recent holds keys known to be in the pool.
	recent *fifoSet
	// seen holds keys hit once (WriteThroughSelective).
	seen *fifoSet
	// tracked holds the blocks waiting for eviction (WriteBack).
	tracked map[string]B
}

// New returns a Writer for cfg.
func New[B any](cfg Config[B]) (*Writer[B], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Writer[B]{
		cfg:     cfg,
		notify:  make(chan struct{}, 1),
		pending: make(map[string]struct{}),
		recent:  newFIFOSet(cfg.RecentSize),
		seen:    newFIFOSet(cfg.SeenSize),
		tracked: make(map[string]B),
	}, nil
}

// Stats returns a snapshot of the counters.
func (w *Writer[B]) Stats() Counters {
	return Counters{
		Offered:          w.c.offered.Load(),
		Evicted:          w.c.evicted.Load(),
		Queued:           w.c.queued.Load(),
		Stored:           w.c.stored.Load(),
		DedupSkipped:     w.c.dedupSkipped.Load(),
		DroppedFull:      w.c.droppedFull.Load(),
		Failed:           w.c.failed.Load(),
		FirstHitDeferred: w.c.firstHitDeferred.Load(),
		Tracked:          w.c.tracked.Load(),
		Discarded:        w.c.discarded.Load(),
		ExistErrors:      w.c.existErrors.Load(),
	}
}

// Len returns the number of blocks queued and tracked.
func (w *Writer[B]) Len() (queued, tracked int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue), len(w.tracked)
}

// Offer reports that the engine holds block under key (it computed or
// loaded it, or hit it in its own cache) and applies the policy. It never
// blocks on I/O. It returns Queued or Tracked when the Writer now holds
// the block (see Config.OnDone), else Deferred, Skipped or Dropped.
func (w *Writer[B]) Offer(key string, block B) Outcome {
	w.c.offered.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.knownLocked(key) {
		w.c.dedupSkipped.Add(1)
		return Skipped
	}
	switch w.cfg.Policy {
	case WriteThroughSelective:
		if !w.seen.has(key) {
			w.seen.add(key)
			w.c.firstHitDeferred.Add(1)
			return Deferred
		}
		w.seen.remove(key)
	case WriteBack:
		if _, ok := w.tracked[key]; ok {
			w.c.dedupSkipped.Add(1)
			return Skipped
		}
		if len(w.tracked) >= w.cfg.TrackSize {
			w.c.droppedFull.Add(1)
			return Dropped
		}
		w.tracked[key] = block
		w.c.tracked.Add(1)
		return Tracked
	}
	return w.enqueueLocked(key, block)
}

// OnEvict reports that the engine evicted key from its own tier. Under
// WriteBack a tracked block moves to the queue (Queued), or is dropped
// when the queue is full (Dropped; OnDone is called); otherwise it returns
// Ignored. The caller keeps the block's bytes valid until OnDone.
func (w *Writer[B]) OnEvict(key string) Outcome {
	w.c.evicted.Add(1)
	w.mu.Lock()
	block, ok := w.tracked[key]
	if !ok {
		w.mu.Unlock()
		return Ignored
	}
	delete(w.tracked, key)
	o := w.enqueueLocked(key, block)
	w.mu.Unlock()
	if o == Dropped {
		w.done(key, block, Dropped)
	}
	return o
}

// knownLocked reports whether key is in the pool or on its way there.
func (w *Writer[B]) knownLocked(key string) bool {
	if w.recent.has(key) {
		return true
	}
	_, ok := w.pending[key]
	return ok
}

// enqueueLocked appends a block to the queue, or drops it when full.
func (w *Writer[B]) enqueueLocked(key string, block B) Outcome {
	if len(w.queue) >= w.cfg.QueueSize {
		w.c.droppedFull.Add(1)
		return Dropped
	}
	w.queue = append(w.queue, item[B]{key, block})
	w.pending[key] = struct{}{}
	w.c.queued.Add(1)
	select {
	case w.notify <- struct{}{}:
	default:
	}
	return Queued
}

// Flush handles one batch (up to BatchSize queued blocks): it skips the
// keys the Exister reports present and stores the rest with one Store
// call, both bounded by ctx and Config.Timeout. It returns how many blocks
// it handled (0 when the queue was empty). An Exister failure is counted
// and the batch is stored unchecked (a put of a present key is a no-op).
func (w *Writer[B]) Flush(ctx context.Context) int {
	w.mu.Lock()
	n := min(len(w.queue), w.cfg.BatchSize)
	batch := make([]item[B], n)
	copy(batch, w.queue)
	clear(w.queue[:n]) // drop references held by the backing array
	w.queue = w.queue[n:]
	if len(w.queue) == 0 {
		w.queue = nil
	}
	w.mu.Unlock()
	if n == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()

	outcomes := make([]Outcome, n)
	keys := make([]string, n)
	for i, it := range batch {
		keys[i] = it.key
	}
	todo := make([]int, 0, n) // indexes to store
	if w.cfg.Exister != nil {
		found, err := w.cfg.Exister.BatchIsExist(ctx, keys)
		if err != nil || len(found) != n {
			w.c.existErrors.Add(1)
			found = nil
		}
		for i := range batch {
			if found != nil && found[i] {
				outcomes[i] = Skipped
			} else {
				todo = append(todo, i)
			}
		}
	} else {
		for i := range batch {
			todo = append(todo, i)
		}
	}
	if len(todo) > 0 {
		skeys := make([]string, len(todo))
		blocks := make([]B, len(todo))
		for j, i := range todo {
			skeys[j], blocks[j] = batch[i].key, batch[i].block
		}
		errs := w.cfg.Store(ctx, skeys, blocks)
		for j, i := range todo {
			if len(errs) == len(todo) && errs[j] == nil {
				outcomes[i] = Stored
			} else {
				outcomes[i] = Failed
			}
		}
	}

	w.mu.Lock()
	for i, it := range batch {
		delete(w.pending, it.key)
		switch outcomes[i] {
		case Stored:
			w.recent.add(it.key)
			w.c.stored.Add(1)
		case Skipped:
			w.recent.add(it.key)
			w.c.dedupSkipped.Add(1)
		default:
			w.c.failed.Add(1)
		}
	}
	w.mu.Unlock()
	for i, it := range batch {
		w.done(it.key, it.block, outcomes[i])
	}
	return n
}

// Run calls Flush whenever blocks are queued, until ctx is done; it
// returns ctx's error. Blocks still queued then stay queued (Flush or
// Discard them).
func (w *Writer[B]) Run(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if w.Flush(ctx) > 0 {
			continue
		}
		select {
		case <-w.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Discard lets every queued and tracked block go (OnDone with Discarded),
// for shutdown, and returns how many there were. Blocks being flushed are
// not affected.
func (w *Writer[B]) Discard() int {
	w.mu.Lock()
	var out []item[B]
	for _, it := range w.queue {
		delete(w.pending, it.key)
		out = append(out, it)
	}
	w.queue = nil
	for k, b := range w.tracked {
		out = append(out, item[B]{k, b})
	}
	clear(w.tracked)
	w.mu.Unlock()
	w.c.discarded.Add(uint64(len(out)))
	for _, it := range out {
		w.done(it.key, it.block, Discarded)
	}
	return len(out)
}

func (w *Writer[B]) done(key string, block B, o Outcome) {
	if w.cfg.OnDone != nil {
		w.cfg.OnDone(key, block, o)
	}
}

// fifoSet is a set of at most max keys that forgets the oldest first. It
// is not safe for concurrent use (Writer.mu guards it).
type fifoSet struct {
	max  int
	gen  uint64
	keys map[string]uint64 // key -> generation of its live entry
	ring []fifoEntry       // insertion order; stale entries are skipped
	head int
}

type fifoEntry struct {
	key string
	gen uint64
}

func newFIFOSet(max int) *fifoSet {
	return &fifoSet{max: max, keys: make(map[string]uint64)}
}

func (s *fifoSet) has(key string) bool { _, ok := s.keys[key]; return ok }

func (s *fifoSet) remove(key string) { delete(s.keys, key) }

// add inserts key (refreshing its age) and forgets the oldest keys beyond
// max. The ring is compacted when stale entries dominate it.
func (s *fifoSet) add(key string) {
	s.gen++
	s.keys[key] = s.gen
	s.ring = append(s.ring, fifoEntry{key, s.gen})
	for len(s.keys) > s.max {
		e := s.ring[s.head]
		s.ring[s.head] = fifoEntry{}
		s.head++
		if g, ok := s.keys[e.key]; ok && g == e.gen {
			delete(s.keys, e.key)
		}
	}
	if live := len(s.ring) - s.head; live > 2*s.max+16 || s.head > len(s.ring)/2 {
		s.compact()
	}
}

// compact drops the consumed and stale ring entries.
func (s *fifoSet) compact() {
	out := make([]fifoEntry, 0, len(s.keys))
	for _, e := range s.ring[s.head:] {
		if g, ok := s.keys[e.key]; ok && g == e.gen {
			out = append(out, e)
		}
	}
	s.ring, s.head = out, 0
}
