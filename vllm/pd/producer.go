package pd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/core/transfer"
)

// Side-channel limits on the producer.
const (
	// requestReadTimeout bounds reading a consumer's request once connected.
	requestReadTimeout = 10 * time.Second
	// replyWriteTimeout bounds writing the reply.
	replyWriteTimeout = 10 * time.Second
	// maxSideConns bounds the side-channel connections served at once;
	// beyond it a connection is answered with an error and closed.
	maxSideConns = 4096
)

// xferState is where a transfer is on the producer.
type xferState int

const (
	stWaiting xferState = iota // a consumer asked, Ready not called yet
	stReady                    // Ready called, no consumer yet (AbortTimeout timer runs)
	stSending                  // a consumer's request is writing it
)

// xfer is one live transfer on the producer (guarded by Producer.mu).
type xfer struct {
	state   xferState
	blocks  []int         // producer block ids (stReady, stSending)
	wake    chan struct{} // stWaiting: closed by Ready or Drop
	waiters int           // consumer requests waiting on wake
	timer   *time.Timer   // stReady: AbortTimeout expiry
}

// tomb remembers why a finished transfer id finished, so a late consumer
// request gets an answer instead of waiting.
type tomb struct {
	id     string
	reason string
	at     time.Time
}

// Producer is the prefill (kv_producer) worker's half of the P/D push: it
// serves consumers' requests on a side channel and writes its KV blocks
// into the consumer's registered regions with the transfer engine, as
// upstream MooncakeConnector's sender.
//
// Life of a transfer: the scheduler calls Ready once the request finished
// prefill (upstream: request_finished with a length cap; the block ids are
// recorded under the transfer id). A consumer's request for that transfer
// id may arrive before or after Ready; it waits for Ready at most
// AbortTimeout (and at most the consumer's own budget). The producer then
// checks shapes and writes, replies, and reports the transfer id in
// Finished. A transfer that was Ready but never asked for is reported after
// AbortTimeout. Drop forgets a transfer.
//
// Concurrency: all methods are safe for concurrent use. One mutex guards
// the transfer table, the finished list and the side-channel connections;
// no I/O runs under it. Each side-channel connection has a goroutine; the
// write runs on it.
type Producer struct {
	cfg      Config
	w        *worker
	ln       net.Listener
	boot     *BootstrapServer // nil unless this worker serves it
	bootAddr string           // where this worker registered
	ctx      context.Context  // cancelled by Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup // accept loop and connection handlers
	news     chan struct{}  // a token (never blocking) per finished transfer

	mu struct {
		sync.Mutex
		xfers    map[string]*xfer
		tombs    map[string]tomb
		tombQ    []tomb // tombs in the order they were made (pruned after AbortTimeout)
		finished []string
		conns    map[net.Conn]struct{}
		closed   bool
	}
}

// NewProducer starts a producer worker: its transfer engine (P2P
// handshake, cfg.Protocol) with cfg.Regions registered, its side-channel
// listener on cfg.Host, the bootstrap server when this is DP rank 0 / TP
// rank 0 and the bootstrap is not external, and registers the side-channel
// address at cfg.BootstrapAddr (retrying until cfg.BootstrapTimeout, since
// rank 0's server may start later). ctx bounds start-up only.
//
// Errors: cfg.Validate's; ErrBootstrap when the bootstrap server cannot be
// served or refuses the registration (a duplicate slot) or stays
// unreachable; the engine's error.
func NewProducer(ctx context.Context, cfg Config) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	base, err := bootstrapURL(cfg.BootstrapAddr)
	if err != nil {
		return nil, err
	}
	p := &Producer{cfg: cfg, news: make(chan struct{}, 1)}
	p.mu.xfers = map[string]*xfer{}
	p.mu.tombs = map[string]tomb{}
	p.mu.conns = map[net.Conn]struct{}{}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	fail := func(err error) (*Producer, error) {
		p.Close()
		return nil, err
	}
	if !cfg.ExternalBootstrap && cfg.DPRank == 0 && cfg.TPRank == 0 {
		if p.boot, err = NewBootstrapServer(base[len("http://"):]); err != nil {
			p.cancel()
			return nil, fmt.Errorf("%w (producer dp 0 tp 0 serves the bootstrap server; set ExternalBootstrap when another process serves it)", err)
		}
		base = "http://" + p.boot.Addr()
	}
	p.bootAddr = base[len("http://"):]
	if p.w, err = startWorker(ctx, cfg, false); err != nil {
		return fail(err)
	}
	if p.ln, err = net.Listen("tcp", net.JoinHostPort(cfg.Host, "0")); err != nil {
		return fail(fmt.Errorf("pd: producer %q: side-channel listen: %w", cfg.EngineID, err))
	}
	p.wg.Add(1)
	go p.accept()

	_, port, _ := net.SplitHostPort(p.ln.Addr().String())
	reg := Registration{EngineID: cfg.EngineID, DPRank: cfg.DPRank, TPRank: cfg.TPRank, Addr: "tcp://" + net.JoinHostPort(cfg.Host, port), TPSize: cfg.TPSize}
	rctx, cancel := context.WithTimeout(ctx, cfg.BootstrapTimeout)
	defer cancel()
	hc := &http.Client{Timeout: cfg.BootstrapTimeout}
	if err := retry(rctx, func(ctx context.Context) error { return registerOnce(ctx, hc, base, reg) }); err != nil {
		return fail(fmt.Errorf("%w: producer %q tp %d: register at %s: %v", ErrBootstrap, cfg.EngineID, cfg.TPRank, base, err))
	}
	hc.CloseIdleConnections()
	cfg.Logger.Debug("pd producer started", "engine_id", cfg.EngineID, "tp_rank", cfg.TPRank, "segment", p.w.segment(), "side_channel", reg.Addr, "bootstrap", base)
	return p, nil
}

// BootstrapAddr is the "host:port" of the bootstrap server this worker
// registered with (the bound address when it serves it itself, e.g. after
// asking for port 0). Consumers pass it (or "http://" + it) to Recv.
func (p *Producer) BootstrapAddr() string { return p.bootAddr }

// Segment is the transfer engine's segment name ("host:port").
func (p *Producer) Segment() string { return p.w.segment() }

// Ready records that transferID finished prefill and its KV is in
// blockIDs (producer block ids, in order; the consumer's blocks receive
// the last len(consumer ids) of them). A consumer waiting for it is served
// now; otherwise the first request for it is. If none comes within
// AbortTimeout, the transfer is reported in Finished (upstream frees unsent
// KV after VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT).
//
// Errors (nothing is recorded; the caller still owns the blocks):
// ErrInvalidArgument for an empty id, a block id that is 0, out of range
// of the smallest region or duplicated, or an id already Ready / sending /
// finished; ErrDropped for an id Dropped earlier; ErrClosed.
func (p *Producer) Ready(transferID string, blockIDs []int) error {
	if transferID == "" {
		return fmt.Errorf("%w: ready: empty transfer id", ErrInvalidArgument)
	}
	if err := checkBlocks("producer", blockIDs, minBlocks(p.cfg.Regions)); err != nil {
		return fmt.Errorf("%w (ready %q)", err, transferID)
	}
	blocks := append([]int(nil), blockIDs...)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return ErrClosed
	}
	p.pruneLocked()
	if t, ok := p.mu.tombs[transferID]; ok {
		if t.reason == "dropped" {
			return fmt.Errorf("%w: ready %q: it was dropped", ErrDropped, transferID)
		}
		return fmt.Errorf("%w: ready %q: already finished (%s)", ErrInvalidArgument, transferID, t.reason)
	}
	x := p.mu.xfers[transferID]
	switch {
	case x == nil:
		x = &xfer{}
		p.mu.xfers[transferID] = x
	case x.state != stWaiting:
		return fmt.Errorf("%w: ready %q called twice", ErrInvalidArgument, transferID)
	default:
		close(x.wake)
		x.wake = nil
	}
	x.state, x.blocks = stReady, blocks
	x.timer = time.AfterFunc(p.cfg.AbortTimeout, func() { p.expire(transferID, x) })
	return nil
}

// expire finishes x if it is still Ready and unclaimed.
func (p *Producer) expire(id string, x *xfer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.xfers[id] != x || x.state != stReady {
		return
	}
	p.finishLocked(id, "expired")
	p.cfg.Logger.Warn("pd producer: transfer never requested, freeing its blocks", "transfer_id", id, "abort_timeout", p.cfg.AbortTimeout)
}

// Drop forgets transferID: the request was aborted or finished without
// being sent (upstream: request_finished returned False; the worker drops
// the transfer id). A Ready transfer not yet being sent is reported in
// Finished at once; one being written is reported when the write ends
// (its blocks are being read until then); a transfer never Ready is not
// reported (it holds no blocks), and a consumer waiting for it, or asking
// later, gets ErrDropped. Unknown or finished ids are remembered for
// AbortTimeout; no error.
func (p *Producer) Drop(transferID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed || transferID == "" {
		return
	}
	p.pruneLocked()
	x := p.mu.xfers[transferID]
	switch {
	case x == nil:
		if _, ok := p.mu.tombs[transferID]; !ok {
			p.tombLocked(transferID, "dropped")
		}
	case x.state == stWaiting:
		close(x.wake)
		delete(p.mu.xfers, transferID)
		p.tombLocked(transferID, "dropped")
	case x.state == stReady:
		p.finishLocked(transferID, "dropped")
	}
}

// Finished returns the transfer ids whose blocks may be freed now (sent,
// failed, dropped while Ready, or expired), each once over the Producer's
// life (upstream get_finished's done_sending). After Close it returns what
// was left, including transfers Close finished.
func (p *Producer) Finished() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.mu.finished
	p.mu.finished = nil
	return out
}

// finishLocked ends a live transfer: removes it, stops its timer, leaves a
// tomb and reports it.
func (p *Producer) finishLocked(id, reason string) {
	if x := p.mu.xfers[id]; x != nil && x.timer != nil {
		x.timer.Stop()
	}
	delete(p.mu.xfers, id)
	p.tombLocked(id, reason)
	p.mu.finished = append(p.mu.finished, id)
	select {
	case p.news <- struct{}{}:
	default:
	}
}

// News gets a token (it never blocks the producer) each time a transfer
// finishes, so that an idle engine step can wait for Finished to have
// something instead of polling it.
func (p *Producer) News() <-chan struct{} { return p.news }

func (p *Producer) tombLocked(id, reason string) {
	t := tomb{id: id, reason: reason, at: time.Now()}
	p.mu.tombs[id] = t
	p.mu.tombQ = append(p.mu.tombQ, t)
}

// pruneLocked forgets tombs older than AbortTimeout.
func (p *Producer) pruneLocked() {
	cut := time.Now().Add(-p.cfg.AbortTimeout)
	i := 0
	for ; i < len(p.mu.tombQ) && p.mu.tombQ[i].at.Before(cut); i++ {
		t := p.mu.tombQ[i]
		if cur, ok := p.mu.tombs[t.id]; ok && cur.at.Equal(t.at) {
			delete(p.mu.tombs, t.id)
		}
	}
	p.mu.tombQ = p.mu.tombQ[i:]
}

// Close stops serving: the side channel closes, waiting and running
// requests are cancelled (their consumers get an error or a broken
// connection), the bootstrap server (if served here) and the transfer
// engine stop. Transfers still held are reported in Finished. Errors: the
// engine's close error; ErrClosed on a second call.
func (p *Producer) Close() error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.mu.closed = true
	for id, x := range p.mu.xfers {
		switch x.state {
		case stWaiting:
			close(x.wake)
			delete(p.mu.xfers, id)
		case stReady:
			p.finishLocked(id, "closed")
		}
	}
	conns := p.mu.conns
	p.mu.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()

	p.cancel()
	if p.ln != nil {
		p.ln.Close()
	}
	for c := range conns {
		c.Close()
	}
	p.wg.Wait()
	var err error
	if p.boot != nil {
		p.boot.Close()
	}
	if p.w != nil {
		err = p.w.close()
	}
	p.mu.Lock()
	for id := range p.mu.xfers { // none: sending ones were finished by their handlers
		p.finishLocked(id, "closed")
	}
	p.mu.Unlock()
	return err
}

// accept serves side-channel connections until the listener closes.
func (p *Producer) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.mu.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		busy := len(p.mu.conns) >= maxSideConns
		if !busy {
			p.mu.conns[c] = struct{}{}
		}
		p.mu.Unlock()
		if busy {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			_ = writeMessage(c, replyFor(fmt.Errorf("%w: producer %q is serving %d requests", ErrTransfer, p.cfg.EngineID, maxSideConns)))
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve answers one consumer request on c.
func (p *Producer) serve(c net.Conn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.mu.conns, c)
		p.mu.Unlock()
		c.Close()
	}()
	c.SetReadDeadline(time.Now().Add(requestReadTimeout))
	var req recvRequest
	if err := readMessage(c, &req); err != nil {
		p.cfg.Logger.Warn("pd producer: bad side-channel request", "from", c.RemoteAddr().String(), "err", err)
		c.SetWriteDeadline(time.Now().Add(replyWriteTimeout))
		_ = writeMessage(c, replyFor(fmt.Errorf("%w: reading request: %v", ErrInvalidArgument, err)))
		return
	}
	// The consumer sends nothing more: a read returning means it hung up
	// (gave up), which cancels the wait for Ready and the write.
	ctx, cancel := context.WithCancelCause(p.ctx)
	defer cancel(nil)
	c.SetReadDeadline(time.Time{})
	hung := make(chan struct{})
	go func() {
		defer close(hung)
		var b [1]byte
		_, _ = c.Read(b[:])
		cancel(fmt.Errorf("%w: consumer hung up", ErrTimeout))
	}()
	err := p.handle(ctx, &req)
	if err != nil {
		p.cfg.Logger.Warn("pd producer: transfer failed", "transfer_id", req.TransferID, "consumer", req.Segment, "err", err)
	}
	c.SetWriteDeadline(time.Now().Add(replyWriteTimeout))
	_ = writeMessage(c, replyFor(err))
	c.SetReadDeadline(time.Now()) // stop the hang-up watcher
	<-hung
}

// handle serves req: waits for Ready, checks, writes; every transfer it
// claimed is finished (reported) before it returns.
func (p *Producer) handle(ctx context.Context, req *recvRequest) error {
	switch {
	case req.Version != wireVersion:
		return fmt.Errorf("%w: side-channel version %d, this producer speaks %d", ErrUnsupported, req.Version, wireVersion)
	case req.TransferID == "":
		return fmt.Errorf("%w: request without transfer_id", ErrInvalidArgument)
	case req.RemoteEngineID != "" && req.RemoteEngineID != p.cfg.EngineID:
		return fmt.Errorf("%w: request for engine %q reached engine %q", ErrInvalidArgument, req.RemoteEngineID, p.cfg.EngineID)
	}
	wait := p.cfg.AbortTimeout
	if req.BudgetMS > 0 {
		budget := time.Duration(req.BudgetMS) * time.Millisecond
		wait = min(wait, budget-min(time.Second, budget/10))
	}
	wctx, cancel := context.WithTimeoutCause(ctx, wait, fmt.Errorf("%w: transfer %q: not ready and sent within %v (AbortTimeout or the consumer's budget)", ErrTimeout, req.TransferID, wait))
	defer cancel()
	blocks, err := p.claim(wctx, req.TransferID)
	if err != nil {
		return err
	}
	err = p.send(wctx, req, blocks)
	reason := "sent"
	if err != nil {
		reason = "failed"
	}
	p.mu.Lock()
	p.finishLocked(req.TransferID, reason)
	p.mu.Unlock()
	return err
}

// claim waits until id is Ready and takes it for sending.
func (p *Producer) claim(ctx context.Context, id string) ([]int, error) {
	var waited *xfer
	for {
		p.mu.Lock()
		if waited != nil {
			waited.waiters--
			waited = nil
		}
		if p.mu.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: producer %q closing", ErrClosed, p.cfg.EngineID)
		}
		p.pruneLocked()
		x := p.mu.xfers[id]
		if x == nil {
			if t, ok := p.mu.tombs[id]; ok {
				p.mu.Unlock()
				return nil, fmt.Errorf("%w: transfer %q already finished on the producer (%s)", ErrDropped, id, t.reason)
			}
			x = &xfer{state: stWaiting, wake: make(chan struct{})}
			p.mu.xfers[id] = x
		}
		switch x.state {
		case stReady:
			x.timer.Stop()
			x.state = stSending
			blocks := x.blocks
			p.mu.Unlock()
			return blocks, nil
		case stSending:
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: transfer %q is already being sent to another request", ErrInvalidArgument, id)
		}
		wake := x.wake
		x.waiters++
		waited = x
		p.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			p.mu.Lock()
			x.waiters--
			if p.mu.xfers[id] == x && x.state == stWaiting && x.waiters == 0 {
				delete(p.mu.xfers, id)
			}
			p.mu.Unlock()
			return nil, context.Cause(ctx)
		}
	}
}

// send checks req against this producer and writes blocks into the
// consumer's blocks.
func (p *Producer) send(ctx context.Context, req *recvRequest, blocks []int) error {
	if req.TPSize != p.cfg.TPSize {
		return fmt.Errorf("%w: heterogeneous TP: consumer tp_size %d, producer %q tp_size %d", ErrUnsupported, req.TPSize, p.cfg.EngineID, p.cfg.TPSize)
	}
	if req.TPRank != p.cfg.TPRank {
		return fmt.Errorf("%w: consumer tp rank %d reached producer tp rank %d", ErrInvalidArgument, req.TPRank, p.cfg.TPRank)
	}
	if len(req.Regions) != len(p.cfg.Regions) {
		return fmt.Errorf("%w: consumer has %d regions, producer %d", ErrShapeMismatch, len(req.Regions), len(p.cfg.Regions))
	}
	for i, r := range req.Regions {
		if r.BlockBytes != p.cfg.Regions[i].BlockBytes {
			return fmt.Errorf("%w: region %d: consumer blocks of %d bytes, producer %d", ErrShapeMismatch, i, r.BlockBytes, p.cfg.Regions[i].BlockBytes)
		}
		if r.NumBlocks == 0 {
			return fmt.Errorf("%w: consumer region %d has no blocks", ErrInvalidArgument, i)
		}
	}
	minCons := uint64(0)
	for i, r := range req.Regions {
		if i == 0 || r.NumBlocks < minCons {
			minCons = r.NumBlocks
		}
	}
	if err := checkBlocks("consumer", req.BlockIDs, minCons); err != nil {
		return err
	}
	n := len(req.BlockIDs)
	if n == 0 {
		return nil // the consumer's local cache covered everything; nothing to write
	}
	if len(blocks) < n {
		return fmt.Errorf("%w: consumer asked for %d blocks, producer holds %d for transfer %q", ErrShapeMismatch, n, len(blocks), req.TransferID)
	}
	src := blocks[len(blocks)-n:] // consumer had a local prefix hit: send the tail
	reqs := writes(p.cfg.Regions, req.Regions, coalesce(src, req.BlockIDs), 0)
	seg, err := p.w.eng.OpenSegment(ctx, req.Segment)
	if err != nil {
		return fmt.Errorf("%w: open consumer segment %q: %v", ErrTransfer, req.Segment, err)
	}
	for i := range reqs {
		reqs[i].Target = seg
	}
	err = p.w.eng.TransferSync(ctx, reqs)
	if errors.Is(err, transfer.ErrAddressNotRegistered) || errors.Is(err, transfer.ErrRejected) {
		// The consumer may have restarted under the same name with new
		// regions: re-read its descriptor once and retry (writes are
		// idempotent).
		if rerr := p.w.eng.RefreshSegment(ctx, seg); rerr == nil {
			err = p.w.eng.TransferSync(ctx, reqs)
		}
	}
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return fmt.Errorf("%w: write %d requests to %q: %v (%v)", ErrTransfer, len(reqs), req.Segment, err, cause)
		}
		return fmt.Errorf("%w: write %d requests to %q: %v", ErrTransfer, len(reqs), req.Segment, err)
	}
	p.cfg.Logger.Debug("pd producer: sent", "transfer_id", req.TransferID, "blocks", n, "requests", len(reqs), "consumer", req.Segment)
	return nil
}
