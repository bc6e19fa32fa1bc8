// Package loopback is an in-memory transfer transport for tests: engines
// attached to one Hub reach each other by segment name without sockets. The
// target side checks every request against its registered buffers exactly as
// the tcp transport does. A Hub can inject faults (errors, dropped requests,
// delays) per request through a hook, to test what the engine and the store
// do when the network misbehaves.
//
// Concurrency: Hub and its transports are safe for concurrent use.
package loopback

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// ErrInjected is the error of a request failed by a fault hook returning
// Fail, and of a dropped request.
var ErrInjected = errors.New("loopback: injected fault")

// Call describes one request as seen by a fault hook.
type Call struct {
	From, To string // segment names
	Op       transfer.Opcode
	Addr     uint64 // target address
	Length   uint64 // bytes
}

// Fault is what a hook decides for one request.
type Fault int

const (
	// Pass lets the request through.
	Pass Fault = iota
	// Fail fails the request before any byte moves (the target is untouched).
	Fail
	// Drop loses the request: the caller waits until its context ends, as on
	// a silent network, and nothing moves.
	Drop
	// FailAfter moves the bytes, then reports failure (a lost acknowledgement).
	FailAfter
)

// Hook decides a request's fate. It may block (a delay) honouring ctx.
type Hook func(ctx context.Context, c Call) Fault

// Hub is one in-memory network.
type Hub struct {
	mu struct {
		sync.Mutex
		targets map[string]transfer.Target
		hook    Hook
	}
}

// NewHub returns an empty network.
func NewHub() *Hub {
	h := &Hub{}
	h.mu.targets = map[string]transfer.Target{}
	return h
}

// SetHook installs (or with nil removes) the fault hook for every request.
func (h *Hub) SetHook(f Hook) {
	h.mu.Lock()
	h.mu.hook = f
	h.mu.Unlock()
}

// Transport returns a new transport attached to h.
func (h *Hub) Transport() *Transport { return &Transport{hub: h} }

// Transport is one engine's attachment to a Hub.
type Transport struct {
	hub  *Hub
	name string
}

// Protocol implements transfer.Transport ("loopback").
func (t *Transport) Protocol() string { return "loopback" }

// Listen implements transfer.Transport. Errors: ErrInvalidArgument if the
// name is already attached to the hub.
func (t *Transport) Listen(name string, target transfer.Target) error {
	t.hub.mu.Lock()
	defer t.hub.mu.Unlock()
	if _, ok := t.hub.mu.targets[name]; ok {
		return fmt.Errorf("%w: loopback segment %q already attached", transfer.ErrInvalidArgument, name)
	}
	t.hub.mu.targets[name] = target
	t.name = name
	return nil
}

// Publish implements transfer.Transport.
func (t *Transport) Publish(d *metadata.SegmentDesc, rpc *metadata.RPCMeta) {
	d.Protocol = "loopback"
	rpc.IPOrHostName = "loopback"
}

// Dial implements transfer.Transport; the peer is looked up per request, so
// a detached target fails later requests.
func (t *Transport) Dial(ctx context.Context, d metadata.SegmentDesc, rpc metadata.RPCMeta) (transfer.Peer, error) {
	return &peer{hub: t.hub, from: t.name, to: d.Name}, nil
}

// Close implements transfer.Transport: detaches from the hub (later requests
// to this segment fail as if the process died).
func (t *Transport) Close() error {
	t.hub.mu.Lock()
	defer t.hub.mu.Unlock()
	if t.name == "" {
		return transfer.ErrClosed
	}
	delete(t.hub.mu.targets, t.name)
	t.name = ""
	return nil
}

type peer struct {
	hub      *Hub
	from, to string
}

// Do implements transfer.Peer.
func (p *peer) Do(ctx context.Context, op transfer.Opcode, local []byte, addr uint64) error {
	p.hub.mu.Lock()
	target, ok := p.hub.mu.targets[p.to]
	hook := p.hub.mu.hook
	p.hub.mu.Unlock()
	if !ok {
		return fmt.Errorf("loopback: segment %q: connection refused", p.to)
	}
	fault := Pass
	if hook != nil {
		fault = hook(ctx, Call{From: p.from, To: p.to, Op: op, Addr: addr, Length: uint64(len(local))})
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch fault {
	case Fail:
		return fmt.Errorf("%w: %s to %q at %#x", ErrInjected, op, p.to, addr)
	case Drop:
		<-ctx.Done()
		return fmt.Errorf("%w: dropped %s to %q: %v", ErrInjected, op, p.to, ctx.Err())
	}
	buf, err := transfer.ResolveFor(target, op, addr, uint64(len(local)))
	if err != nil {
		return fmt.Errorf("%w: %v", transfer.ErrRejected, err)
	}
	if op == transfer.Write {
		copy(buf, local)
	} else {
		copy(local, buf)
	}
	if fault == FailAfter {
		return fmt.Errorf("%w: acknowledgement of %s to %q lost", ErrInjected, op, p.to)
	}
	return nil
}

// Close implements transfer.Peer.
func (p *peer) Close() error { return nil }
