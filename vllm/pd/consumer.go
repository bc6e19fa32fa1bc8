package pd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Result is how one Recv ended.
type Result struct {
	// TransferID is the Recv's transfer id.
	TransferID string
	// Err is nil when every block landed; otherwise why not (wrapping
	// one of the package's sentinels).
	Err error
	// FailedBlocks are the consumer block ids that did not (or may not
	// have) landed: all of the Recv's ids when Err is set, none otherwise.
	FailedBlocks []int
}

// peerEntry caches one bootstrap query result per (bootstrap, engine id).
type peerEntry struct {
	done  chan struct{} // closed when the query finished
	addrs map[int]string
	err   error
}

// Consumer is the decode (kv_consumer) worker's half of the P/D push: its
// KV regions are registered remote-writable in a transfer engine, and for
// each Recv it asks the producer worker of the same TP rank (found through
// the producer's bootstrap server) to write the KV into the given blocks,
// as upstream MooncakeConnector's receiver.
//
// Every Recv that returns nil is reported exactly once by Finished (or
// FinishedResults): when the bytes landed, when the producer answered an
// error, when the producer or bootstrap was unreachable, when RecvTimeout
// passed, or at Close. Failed ones carry all their block ids (upstream
// get_block_ids_with_load_errors). A Recv never hangs: RecvTimeout bounds
// it, plus ReplyGrace for the producer's reply (the producer stops
// starting writes when the consumer's budget ends, so bytes cannot land
// after a failure is reported unless the producer is unresponsive past
// ReplyGrace, or the Consumer was closed).
//
// Concurrency: all methods are safe for concurrent use. One mutex guards
// the pending set, the results and the bootstrap cache; no I/O under it.
// Each Recv runs on its own goroutine.
type Consumer struct {
	cfg    Config
	w      *worker
	hc     *http.Client
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // Recv goroutines
	news   chan struct{}  // a token (never blocking) per ended Recv

	mu struct {
		sync.Mutex
		pending map[string]struct{}
		results []Result
		peers   map[string]*peerEntry // by bootstrap URL + "\x00" + engine id
		closed  bool
	}
}

// NewConsumer starts a consumer worker: its transfer engine (P2P
// handshake, cfg.Protocol) with cfg.Regions registered remote-writable.
// ctx bounds start-up only. Errors: cfg.Validate's; the engine's.
func NewConsumer(ctx context.Context, cfg Config) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	w, err := startWorker(ctx, cfg, true)
	if err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, w: w, hc: &http.Client{Timeout: cfg.BootstrapTimeout}, news: make(chan struct{}, 1)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mu.pending = map[string]struct{}{}
	c.mu.peers = map[string]*peerEntry{}
	cfg.Logger.Debug("pd consumer started", "engine_id", cfg.EngineID, "tp_rank", cfg.TPRank, "segment", w.segment())
	return c, nil
}

// Segment is the transfer engine's segment name ("host:port").
func (c *Consumer) Segment() string { return c.w.segment() }

// Recv starts receiving transferID's KV into blockIDs (consumer block ids,
// the request's blocks not covered by a local prefix hit, in order; may be
// empty, which still tells the producer it may free, as upstream) from the
// producer engine remoteEngineID whose bootstrap server is bootstrapAddr
// ("host:port" or "http://host:port", upstream remote_bootstrap_addr). It
// returns at once; the outcome is reported by Finished.
//
// The bootstrap is queried once per (bootstrapAddr, remoteEngineID) and
// cached (concurrent Recvs share the query; a failed query or an
// unreachable cached address is forgotten). The producer worker chosen is
// the one with this worker's TP rank (equal TP only: a producer with
// another TP size fails the Recv with ErrUnsupported).
//
// Errors (nothing started, nothing reported): ErrInvalidArgument for an
// empty transfer id or one already pending; ErrClosed. Every other problem
// (bad block ids, bad address, ...) is reported through Finished.
func (c *Consumer) Recv(transferID, bootstrapAddr, remoteEngineID string, blockIDs []int) error {
	if transferID == "" {
		return fmt.Errorf("%w: recv: empty transfer id", ErrInvalidArgument)
	}
	blocks := append([]int(nil), blockIDs...)
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if _, dup := c.mu.pending[transferID]; dup {
		c.mu.Unlock()
		return fmt.Errorf("%w: recv: transfer %q is already pending", ErrInvalidArgument, transferID)
	}
	c.mu.pending[transferID] = struct{}{}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeoutCause(c.ctx, c.cfg.RecvTimeout, fmt.Errorf("%w: transfer %q: not received within RecvTimeout %v", ErrTimeout, transferID, c.cfg.RecvTimeout))
		defer cancel()
		err := c.recv(ctx, transferID, bootstrapAddr, remoteEngineID, blocks)
		c.finish(transferID, blocks, err)
	}()
	return nil
}

// finish records a Recv's outcome.
func (c *Consumer) finish(id string, blocks []int, err error) {
	r := Result{TransferID: id, Err: err}
	if err != nil {
		r.FailedBlocks = blocks
		if r.FailedBlocks == nil {
			r.FailedBlocks = []int{}
		}
		c.cfg.Logger.Warn("pd consumer: receive failed", "transfer_id", id, "blocks", len(blocks), "err", err)
	}
	c.mu.Lock()
	delete(c.mu.pending, id)
	c.mu.results = append(c.mu.results, r)
	c.mu.Unlock()
	select {
	case c.news <- struct{}{}:
	default:
	}
}

// News gets a token (it never blocks the consumer) each time a Recv ends,
// so that an idle engine step can wait for Finished to have something
// instead of polling it.
func (c *Consumer) News() <-chan struct{} { return c.news }

// Pending returns how many Recvs were started and have not ended yet.
func (c *Consumer) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.pending)
}

// FinishedResults returns the Recvs that ended since the last call (of
// this or Finished), each once, in the order they ended.
func (c *Consumer) FinishedResults() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.mu.results
	c.mu.results = nil
	return out
}

// Finished returns, as vLLM's get_finished and
// get_block_ids_with_load_errors want them, the transfer ids whose Recv
// ended since the last call, landed or failed (done, upstream
// done_recving), and for the failed ones their block ids (failed).
// Drains the same queue as FinishedResults.
func (c *Consumer) Finished() (done []string, failed map[string][]int) {
	for _, r := range c.FinishedResults() {
		done = append(done, r.TransferID)
		if r.Err != nil {
			if failed == nil {
				failed = map[string][]int{}
			}
			failed[r.TransferID] = r.FailedBlocks
		}
	}
	return done, failed
}

// Close cancels every pending Recv (each is reported failed with
// ErrClosed in Finished, which still works after Close), waits for them,
// and stops the transfer engine. Close the consumer only once nothing
// more may be written into its regions: a producer's write in flight at
// Close may still land. Errors: the engine's; ErrClosed on a second call.
func (c *Consumer) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.mu.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.hc.CloseIdleConnections()
	return c.w.close()
}

// recv runs one receive to its end.
func (c *Consumer) recv(ctx context.Context, id, bootstrapAddr, engineID string, blocks []int) error {
	if err := checkBlocks("consumer", blocks, minBlocks(c.cfg.Regions)); err != nil {
		return fmt.Errorf("%w (recv %q)", err, id)
	}
	if engineID == "" {
		return fmt.Errorf("%w: recv %q: empty remote engine id", ErrInvalidArgument, id)
	}
	base, err := bootstrapURL(bootstrapAddr)
	if err != nil {
		return fmt.Errorf("%w (recv %q)", err, id)
	}
	addr, err := c.resolve(ctx, base, engineID)
	if err != nil {
		return c.ended(ctx, fmt.Errorf("%w (recv %q)", err, id))
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		c.forget(base, engineID)
		return c.ended(ctx, fmt.Errorf("%w: recv %q: dial producer %q tp %d at %s: %v", ErrUnreachable, id, engineID, c.cfg.TPRank, addr, err))
	}
	defer conn.Close()
	stop := context.AfterFunc(c.ctx, func() { conn.Close() }) // Close: give up at once
	defer stop()
	deadline, _ := ctx.Deadline()
	req := recvRequest{
		Version:        wireVersion,
		TransferID:     id,
		RemoteEngineID: engineID,
		EngineID:       c.cfg.EngineID,
		Segment:        c.w.segment(),
		TPRank:         c.cfg.TPRank,
		TPSize:         c.cfg.TPSize,
		Regions:        make([]wireRegion, len(c.cfg.Regions)),
		BlockIDs:       blocks,
		BudgetMS:       max(1, time.Until(deadline).Milliseconds()),
	}
	if req.BlockIDs == nil {
		req.BlockIDs = []int{}
	}
	for i, r := range c.cfg.Regions {
		req.Regions[i] = wireRegion{Base: r.base(), BlockBytes: r.BlockBytes, NumBlocks: r.NumBlocks}
	}
	conn.SetDeadline(deadline.Add(ReplyGrace))
	if err := writeMessage(conn, req); err != nil {
		return c.ended(ctx, fmt.Errorf("%w: recv %q: send request to %s: %v", ErrUnreachable, id, addr, err))
	}
	var rep recvReply
	if err := readMessage(conn, &rep); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return c.ended(ctx, fmt.Errorf("%w: recv %q: no reply from producer %s within RecvTimeout %v + %v", ErrTimeout, id, addr, c.cfg.RecvTimeout, ReplyGrace))
		}
		return c.ended(ctx, fmt.Errorf("%w: recv %q: reading reply from %s: %v", ErrUnreachable, id, addr, err))
	}
	if err := rep.err(); err != nil {
		return fmt.Errorf("%w (recv %q)", err, id)
	}
	return nil
}

// ended prefers ErrClosed when the Consumer closed under a failing step.
func (c *Consumer) ended(ctx context.Context, err error) error {
	if c.ctx.Err() != nil {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return err
}

// resolve finds the side-channel address of engineID's worker with this
// TP rank, querying base/query once per (base, engine) (retried until it
// lists that rank, bounded by ctx and BootstrapTimeout).
func (c *Consumer) resolve(ctx context.Context, base, engineID string) (string, error) {
	key := base + "\x00" + engineID
	c.mu.Lock()
	e := c.mu.peers[key]
	owner := e == nil
	if owner {
		e = &peerEntry{done: make(chan struct{})}
		c.mu.peers[key] = e
	}
	c.mu.Unlock()
	if owner {
		addrs, err := c.query(ctx, base, engineID)
		c.mu.Lock()
		e.addrs, e.err = addrs, err
		if err != nil && c.mu.peers[key] == e {
			delete(c.mu.peers, key) // the next Recv asks again
		}
		c.mu.Unlock()
		close(e.done)
	} else {
		select {
		case <-e.done:
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
	}
	if e.err != nil {
		return "", e.err
	}
	return e.addrs[c.cfg.TPRank], nil
}

// forget drops a cached query so the next Recv asks again.
func (c *Consumer) forget(base, engineID string) {
	key := base + "\x00" + engineID
	c.mu.Lock()
	if e := c.mu.peers[key]; e != nil {
		select {
		case <-e.done:
			delete(c.mu.peers, key)
		default: // a query is running; its owner decides
		}
	}
	c.mu.Unlock()
}

// query asks the bootstrap server for engineID until it lists this TP
// rank; it fails at once for unequal TP sizes.
func (c *Consumer) query(ctx context.Context, base, engineID string) (map[int]string, error) {
	qctx, cancel := context.WithTimeout(ctx, c.cfg.BootstrapTimeout)
	defer cancel()
	var out map[int]string
	err := retry(qctx, func(ctx context.Context) error {
		table, err := queryOnce(ctx, c.hc, base)
		if err != nil {
			return err
		}
		for _, e := range table {
			if e.EngineID != engineID {
				continue
			}
			if e.TPSize != 0 && e.TPSize != c.cfg.TPSize {
				return permanent(fmt.Errorf("%w: heterogeneous TP: producer engine %q has tp_size %d, this consumer %d", ErrUnsupported, engineID, e.TPSize, c.cfg.TPSize))
			}
			for r := range e.WorkerAddr {
				if r >= c.cfg.TPSize {
					return permanent(fmt.Errorf("%w: heterogeneous TP: producer engine %q has tp rank %d, this consumer's tp_size is %d", ErrUnsupported, engineID, r, c.cfg.TPSize))
				}
			}
			_, ok := e.WorkerAddr[c.cfg.TPRank][0]
			if !ok {
				return fmt.Errorf("engine %q has tp ranks %s registered, not %d (yet)", engineID, ranks(e), c.cfg.TPRank)
			}
			out = map[int]string{}
			for r, pp := range e.WorkerAddr {
				out[r] = sideAddr(pp[0])
			}
			return nil
		}
		return fmt.Errorf("engine %q is not registered (yet)", engineID)
	})
	if err != nil {
		if errors.Is(err, ErrUnsupported) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrBootstrap, base, err)
	}
	return out, nil
}
