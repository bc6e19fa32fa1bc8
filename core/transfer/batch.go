package transfer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
)

// batch holds up to cap requests and their states.
type batch struct {
	capacity int
	mu       struct {
		sync.Mutex
		tasks   []task
		pending int           // tasks not yet finished
		done    chan struct{} // closed when pending drops to 0; replaced on new submissions
	}
}

type task struct {
	req    Request
	status Status
	bytes  uint64
	err    error
}

// AllocateBatch creates a batch that can hold up to size requests. Errors:
// ErrInvalidArgument for size <= 0; ErrClosed. Mirrors upstream
// allocateBatchID(batch_size).
func (e *Engine) AllocateBatch(size int) (BatchID, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	if size <= 0 {
		return 0, fmt.Errorf("%w: batch size %d", ErrInvalidArgument, size)
	}
	b := &batch{capacity: size}
	b.mu.done = make(chan struct{})
	close(b.mu.done)
	id := BatchID(e.nextB.Add(1))
	e.mu.Lock()
	e.mu.batches[id] = b
	e.mu.Unlock()
	return id, nil
}

func (e *Engine) batch(id BatchID) (*batch, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.mu.batches[id]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrInvalidBatch, id)
	}
	return b, nil
}

// Submit queues reqs in batch id and returns at once; each request runs
// asynchronously and is polled with Status (task index = order of
// submission across all Submit calls of the batch). Requests that fail
// validation (zero length, unregistered local source, unknown target
// handle, remote range outside the peer's published buffers) are queued
// already FAILED with the reason, so indices stay stable. Errors:
// ErrInvalidBatch, ErrTooManyRequests (nothing queued), ErrClosed. Mirrors
// upstream submitTransfer.
func (e *Engine) Submit(id BatchID, reqs []Request) error {
	b, err := e.batch(id)
	if err != nil {
		return err
	}
	// Held from the closed check to inflight.Add, so that Close, which sets
	// closed under the write lock before it waits, never waits on a
	// WaitGroup that a Submit is still adding to.
	e.life.RLock()
	if e.closed.Load() {
		e.life.RUnlock()
		return ErrClosed
	}
	b.mu.Lock()
	if len(b.mu.tasks)+len(reqs) > b.capacity {
		n := len(b.mu.tasks)
		b.mu.Unlock()
		e.life.RUnlock()
		return fmt.Errorf("%w: batch %d holds %d of %d, %d more submitted", ErrTooManyRequests, id, n, b.capacity, len(reqs))
	}
	// The caller may reuse reqs and their Pieces once Submit returns.
	rs := clonePieces(slices.Clone(reqs))
	first := len(b.mu.tasks)
	if b.mu.pending == 0 && len(rs) > 0 {
		b.mu.done = make(chan struct{})
	}
	for _, r := range rs {
		b.mu.tasks = append(b.mu.tasks, task{req: r, status: StatusWaiting})
	}
	b.mu.pending += len(rs)
	e.inflight.Add(len(rs))
	b.mu.Unlock()
	e.life.RUnlock()
	// A few goroutines drain the submitted requests rather than one per
	// request: a batch of many small requests pays goroutine start-up and
	// stack growth once per worker. Concurrency is still at most
	// Config.Workers across batches.
	var next atomic.Int64
	for range min(len(rs), cap(e.sem)) {
		go func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(rs) {
					return
				}
				e.run(b, first+i, rs[i])
			}
		}()
	}
	return nil
}

// clonePieces gives the scatter-gather requests of rs their own copies of
// their Pieces (all in one allocation) and returns rs.
func clonePieces(rs []Request) []Request {
	n := 0
	for _, r := range rs {
		n += len(r.Pieces)
	}
	if n == 0 {
		return rs
	}
	flat := make([]Piece, 0, n)
	for i := range rs {
		if len(rs[i].Pieces) > 0 {
			k := len(flat)
			flat = append(flat, rs[i].Pieces...)
			rs[i].Pieces = flat[k:len(flat):len(flat)]
		}
	}
	return rs
}

// run executes one request and records its outcome.
func (e *Engine) run(b *batch, idx int, r Request) {
	defer e.inflight.Done()
	var err error
	select {
	case e.sem <- struct{}{}:
		ctx, release := withRequestDeadline(e.ctx, time.Now().Add(e.cfg.RequestTimeout))
		err = e.execute(ctx, r)
		release()
		<-e.sem
	case <-e.ctx.Done():
		err = fmt.Errorf("%w: engine closed before the request ran", ErrClosed)
	}
	b.mu.Lock()
	t := &b.mu.tasks[idx]
	if err != nil {
		t.status, t.err = StatusFailed, err
	} else {
		t.status, t.bytes = StatusCompleted, r.Length
	}
	b.mu.pending--
	if b.mu.pending == 0 {
		close(b.mu.done)
	}
	b.mu.Unlock()
}

// execute performs one request synchronously. Host memory on both sides
// takes the first path; device memory on either side is detected on the
// error path of the host lookups, so host requests pay nothing for it.
func (e *Engine) execute(ctx context.Context, r Request) error {
	if r.Op != Read && r.Op != Write {
		return fmt.Errorf("%w: opcode %d", ErrInvalidArgument, r.Op)
	}
	if r.Length == 0 {
		return fmt.Errorf("%w: zero-length request", ErrInvalidArgument)
	}
	if len(r.Pieces) > 0 {
		return e.executeV(ctx, r)
	}
	local, err := e.reg.Local(r.Source, r.Length)
	if err != nil {
		d, derr := e.reg.localDevice(r.Source, r.Length)
		if derr != nil {
			return fmt.Errorf("local source: %w", err)
		}
		return e.executeDevice(ctx, r, mem{dev: d.Device, addr: d.Addr})
	}
	if r.Target == LocalSegment {
		remote, err := ResolveFor(&e.reg, r.Op, r.TargetOffset, r.Length)
		if err != nil {
			return e.localCopy(r, mem{host: local})
		}
		if r.Op == Write {
			memory.Copy(remote, local)
		} else {
			memory.Copy(local, remote)
		}
		return nil
	}
	s, bd, err := e.remoteBuffer(r)
	if err != nil {
		return err
	}
	if bd.IPCHandle != "" && s.ipc != nil {
		if done, err := e.viaIPC(s, bd, r, mem{host: local}); done {
			return err
		}
	}
	if err := s.peer.Do(ctx, r.Op, local, r.TargetOffset); err != nil {
		return fmt.Errorf("%s %d bytes at %q %#x: %w", r.Op, r.Length, s.name, r.TargetOffset, err)
	}
	return nil
}

// executeV performs a scatter-gather request (r.Pieces set): the pieces
// are resolved in one pass over the registry (pieces adjacent in one
// buffer merged), checked against the published remote range once, and
// moved in one call to the peer (VectorPeer), or piece by piece otherwise.
// Nothing moves unless every piece is registered and the remote range is
// inside one buffer. Pieces in device memory, and device buffers on the
// other side, take the single-request path one piece at a time.
func (e *Engine) executeV(ctx context.Context, r Request) error {
	var total uint64
	for i, p := range r.Pieces {
		if p.Length == 0 {
			return fmt.Errorf("%w: zero-length piece %d", ErrInvalidArgument, i)
		}
		if p.Length > ^uint64(0)-total {
			return fmt.Errorf("%w: pieces overflow the length", ErrInvalidArgument)
		}
		total += p.Length
	}
	if total != r.Length {
		return fmt.Errorf("%w: pieces hold %d bytes, request length %d", ErrInvalidArgument, total, r.Length)
	}
	local, device, err := e.reg.localPieces(r.Pieces)
	if err != nil {
		return fmt.Errorf("local source: %w", err)
	}
	if device {
		return e.executePieces(ctx, r)
	}
	if r.Target == LocalSegment {
		remote, err := ResolveFor(&e.reg, r.Op, r.TargetOffset, r.Length)
		if err != nil {
			if _, derr := e.reg.ResolveDevice(r.TargetOffset, r.Length); derr != nil {
				return fmt.Errorf("local target: %w", err)
			}
			return e.executePieces(ctx, r)
		}
		if r.Op == Write {
			memory.Gather(remote, local)
		} else {
			memory.Scatter(local, remote)
		}
		return nil
	}
	s, bd, err := e.remoteBuffer(r)
	if err != nil {
		return err
	}
	if bd.IPCHandle != "" && s.ipc != nil {
		return e.executePieces(ctx, r)
	}
	if err := doV(ctx, s.peer, r.Op, local, r.TargetOffset); err != nil {
		return fmt.Errorf("%s %d bytes in %d pieces at %q %#x: %w", r.Op, r.Length, len(local), s.name, r.TargetOffset, err)
	}
	return nil
}

// executePieces performs a scatter-gather request as one single request
// per piece, in order, stopping at the first failure.
func (e *Engine) executePieces(ctx context.Context, r Request) error {
	off := r.TargetOffset
	for i, p := range r.Pieces {
		one := Request{Op: r.Op, Source: p.Addr, Target: r.Target, TargetOffset: off, Length: p.Length}
		if err := e.execute(ctx, one); err != nil {
			return fmt.Errorf("piece %d of %d: %w", i, len(r.Pieces), err)
		}
		off += p.Length
	}
	return nil
}

// doV performs one request of the concatenated buffers local on p: with
// DoV when p implements VectorPeer, else one Do per buffer.
func doV(ctx context.Context, p Peer, op Opcode, local [][]byte, remoteAddr uint64) error {
	if len(local) == 1 {
		return p.Do(ctx, op, local[0], remoteAddr)
	}
	if vp, ok := p.(VectorPeer); ok {
		return vp.DoV(ctx, op, local, remoteAddr)
	}
	for _, l := range local {
		if err := p.Do(ctx, op, l, remoteAddr); err != nil {
			return err
		}
		remoteAddr += uint64(len(l))
	}
	return nil
}

// remoteBuffer returns r's opened segment and the published buffer holding
// its remote range.
func (e *Engine) remoteBuffer(r Request) (*peerSeg, *metadata.BufferDesc, error) {
	e.mu.Lock()
	s, ok := e.mu.segs[r.Target]
	var desc *metadata.SegmentDesc
	if ok {
		desc = s.desc
	}
	e.mu.Unlock()
	if !ok {
		return nil, nil, fmt.Errorf("%w: handle %d", ErrSegmentNotFound, r.Target)
	}
	bd := descBuffer(desc, r.TargetOffset, r.Length)
	if bd == nil {
		return nil, nil, fmt.Errorf("%w: [%#x,+%d) not in a published buffer of segment %q", ErrAddressNotRegistered, r.TargetOffset, r.Length, s.name)
	}
	return s, bd, nil
}

// executeDevice performs a request whose local side lm is device memory:
// cudaMemcpy on the local segment, CUDA IPC to a same-host peer's device
// buffer, else the peer's transport through pinned host staging slices.
func (e *Engine) executeDevice(ctx context.Context, r Request, lm mem) error {
	if r.Target == LocalSegment {
		return e.localCopy(r, lm)
	}
	s, bd, err := e.remoteBuffer(r)
	if err != nil {
		return err
	}
	if bd.IPCHandle != "" && s.ipc != nil {
		if done, err := e.viaIPC(s, bd, r, lm); done {
			return err
		}
	}
	if err := viaStaging(ctx, e.staging, e.cfg.CUDA, s.peer, r.Op, lm, r.TargetOffset, r.Length); err != nil {
		return fmt.Errorf("%s %d bytes of device memory at %q %#x: %w", r.Op, r.Length, s.name, r.TargetOffset, err)
	}
	return nil
}

// localCopy performs a request on the engine's own segment when either
// side is device memory, with the matching cudaMemcpy kind.
func (e *Engine) localCopy(r Request, lm mem) error {
	var rm mem
	if b, err := ResolveFor(&e.reg, r.Op, r.TargetOffset, r.Length); err == nil {
		rm = mem{host: b}
	} else if d, derr := e.reg.ResolveDevice(r.TargetOffset, r.Length); derr == nil {
		rm = mem{dev: d.Device, addr: d.Addr}
	} else {
		return fmt.Errorf("local target: %w", err)
	}
	dst, src := rm, lm
	if r.Op == Read {
		dst, src = lm, rm
	}
	if err := copyMem(e.cfg.CUDA, dst, src, r.Length); err != nil {
		return fmt.Errorf("%s %d bytes on the local segment at %#x: %w", r.Op, r.Length, r.TargetOffset, err)
	}
	return nil
}

// viaIPC copies directly between lm and a same-host peer's device buffer
// bd mapped through CUDA IPC. done is false when the buffer cannot be
// mapped (the caller then uses the network path); otherwise err is the
// copy's outcome.
func (e *Engine) viaIPC(s *peerSeg, bd *metadata.BufferDesc, r Request, lm mem) (done bool, err error) {
	m, ok := s.ipc.acquire(&bufferRef{addr: bd.Addr, dev: parseDeviceLocation(bd.Name), token: bd.IPCHandle})
	if !ok {
		return false, nil
	}
	defer s.ipc.release(m)
	rm := mem{dev: m.dev, addr: m.addr + (r.TargetOffset - bd.Addr)}
	dst, src := rm, lm
	if r.Op == Read {
		dst, src = lm, rm
	}
	if err := copyMem(e.cfg.CUDA, dst, src, r.Length); err != nil {
		return true, fmt.Errorf("%s %d bytes at %q %#x through CUDA IPC: %w", r.Op, r.Length, s.name, r.TargetOffset, err)
	}
	return true, nil
}

// Status returns the state of request task of batch id. Errors:
// ErrInvalidBatch; ErrInvalidArgument for an index never submitted.
// Mirrors upstream getTransferStatus.
func (e *Engine) Status(id BatchID, taskIdx int) (TaskStatus, error) {
	b, err := e.batch(id)
	if err != nil {
		return TaskStatus{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if taskIdx < 0 || taskIdx >= len(b.mu.tasks) {
		return TaskStatus{}, fmt.Errorf("%w: task %d of batch %d (holds %d)", ErrInvalidArgument, taskIdx, id, len(b.mu.tasks))
	}
	t := b.mu.tasks[taskIdx]
	return TaskStatus{Status: t.status, TransferredBytes: t.bytes, Err: t.err}, nil
}

// Wait blocks until every request submitted so far to batch id has finished
// or ctx ends, then returns each request's status in submission order.
// Errors: ErrInvalidBatch; ctx.Err() (statuses then reflect the moment of
// return). A Go-side convenience over polling Status.
func (e *Engine) Wait(ctx context.Context, id BatchID) ([]TaskStatus, error) {
	b, err := e.batch(id)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	done := b.mu.done
	b.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]TaskStatus, len(b.mu.tasks))
	for i, t := range b.mu.tasks {
		out[i] = TaskStatus{Status: t.status, TransferredBytes: t.bytes, Err: t.err}
	}
	return out, err
}

// FreeBatch releases batch id. Errors: ErrInvalidBatch; ErrBatchBusy while
// any request is still in flight (nothing is freed). Mirrors upstream
// freeBatchID.
func (e *Engine) FreeBatch(id BatchID) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.mu.batches[id]
	if !ok {
		return fmt.Errorf("%w: %d", ErrInvalidBatch, id)
	}
	b.mu.Lock()
	pending := b.mu.pending
	b.mu.Unlock()
	if pending > 0 {
		return fmt.Errorf("%w: batch %d has %d requests in flight", ErrBatchBusy, id, pending)
	}
	delete(e.mu.batches, id)
	return nil
}

// TransferSync runs reqs in a fresh batch, waits for all of them and frees
// the batch. It returns the first failure (wrapped, naming the request
// index) or nil when every request completed. If ctx ends first it still
// waits for the requests to settle before freeing the batch, so no request
// outlives the call.
func (e *Engine) TransferSync(ctx context.Context, reqs []Request) error {
	if len(reqs) == 0 {
		return nil
	}
	id, err := e.AllocateBatch(len(reqs))
	if err != nil {
		return err
	}
	if err := e.Submit(id, reqs); err != nil {
		_ = e.FreeBatch(id)
		return err
	}
	st, werr := e.Wait(ctx, id)
	if werr != nil {
		st, _ = e.Wait(context.Background(), id)
	}
	_ = e.FreeBatch(id)
	for i, s := range st {
		if s.Status != StatusCompleted {
			return fmt.Errorf("transfer: request %d of %d: %w", i, len(reqs), s.Err)
		}
	}
	return werr
}
