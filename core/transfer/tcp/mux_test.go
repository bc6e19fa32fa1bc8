package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/transfer"
)

// frame is one request a scripted server received.
type frame struct {
	conn    int // index of the accepted connection
	op      transfer.Opcode
	addr    uint64
	payload []byte // WRITE payload
}

// scripted is a hand-driven target speaking the v2 wire format: it reports
// every request it reads on frames and sends nothing until the test says
// so, so tests decide exactly which request is acknowledged when.
type scripted struct {
	ln     net.Listener
	frames chan frame
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startScripted(t *testing.T) *scripted {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{ln: ln, frames: make(chan frame, 1024)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			idx := len(s.conns)
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				var hdr [headerLen]byte
				for {
					if _, err := io.ReadFull(c, hdr[:]); err != nil {
						return
					}
					f := frame{conn: idx, op: transfer.Opcode(hdr[16] &^ protoV2), addr: binary.LittleEndian.Uint64(hdr[8:])}
					if f.op == transfer.Write {
						f.payload = make([]byte, binary.LittleEndian.Uint64(hdr[0:]))
						if _, err := io.ReadFull(c, f.payload); err != nil {
							return
						}
					}
					s.frames <- f
				}
			}()
		}
	}()
	t.Cleanup(func() { s.close(); s.wg.Wait() })
	return s
}

// next returns the next request read, failing the test after 10 s.
func (s *scripted) next(t *testing.T) frame {
	t.Helper()
	select {
	case f := <-s.frames:
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the scripted server")
		return frame{}
	}
}

// send writes raw bytes on accepted connection i.
func (s *scripted) send(t *testing.T, i int, b []byte) {
	t.Helper()
	s.mu.Lock()
	c := s.conns[i]
	s.mu.Unlock()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func status(code uint64) []byte {
	return binary.LittleEndian.AppendUint64(nil, statusMagic|code)
}

// close stops accepting and drops every connection (a killed peer).
func (s *scripted) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
}

type result struct {
	id  int
	err error
}

// doAsync runs p.Do in a goroutine and reports on out.
func doAsync(ctx context.Context, p *peer, id int, op transfer.Opcode, buf []byte, addr uint64, out chan<- result) {
	go func() { out <- result{id, p.Do(ctx, op, buf, addr)} }()
}

// TestAckCompletesOnlyItsRequest: three requests share one connection; the
// target refuses the second and acknowledges the others one at a time. An
// acknowledgement completes exactly the request at the head of the
// connection: the second request is not completed by the first's ack, the
// refusal fails only the second, and the connection stays in use.
func TestAckCompletesOnlyItsRequest(t *testing.T) {
	s := startScripted(t)
	p := dialVia(t, Config{MaxConnsPerPeer: 1}, s.ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := make(chan result, 3)
	bufs := [][]byte{pattern(1000), pattern(2000), make([]byte, 3000)}
	doAsync(ctx, p, 0, transfer.Write, bufs[0], 0x1000, out)
	if f := s.next(t); f.addr != 0x1000 || !bytes.Equal(f.payload, bufs[0]) {
		t.Fatalf("first request: %+v", f)
	}
	doAsync(ctx, p, 1, transfer.Write, bufs[1], 0x2000, out)
	if f := s.next(t); f.addr != 0x2000 || f.conn != 0 {
		t.Fatalf("second request: addr %#x on connection %d", f.addr, f.conn)
	}
	doAsync(ctx, p, 2, transfer.Read, bufs[2], 0x3000, out)
	if f := s.next(t); f.addr != 0x3000 || f.op != transfer.Read || f.conn != 0 {
		t.Fatalf("third request: %+v", f)
	}

	s.send(t, 0, status(statusOK)) // the first request's ack
	if r := <-out; r.id != 0 || r.err != nil {
		t.Fatalf("after the first ack: request %d ended with %v", r.id, r.err)
	}
	select {
	case r := <-out:
		t.Fatalf("request %d ended (%v) without its own status frame", r.id, r.err)
	default:
	}

	s.send(t, 0, status(statusRej)) // the second is refused
	if r := <-out; r.id != 1 || !errors.Is(r.err, transfer.ErrRejected) {
		t.Fatalf("after the refusal: request %d ended with %v, want request 1 rejected", r.id, r.err)
	}
	want := pattern(3000)
	s.send(t, 0, append(status(statusOK), want...)) // the read's response
	if r := <-out; r.id != 2 || r.err != nil {
		t.Fatalf("after the read response: request %d ended with %v", r.id, r.err)
	}
	if !bytes.Equal(bufs[2], want) {
		t.Fatal("read returned other bytes")
	}
	if d := p.dials.Load(); d != 1 {
		t.Fatalf("%d dials: a refusal must not cost the connection", d)
	}
}

// TestPeerKilledWithSeveralInFlightOnOneConnection: several requests are
// in flight on the only connection when the target dies after
// acknowledging some of them. The acknowledged ones complete; every other
// one fails (the redial is refused), none hangs, none reports completed.
func TestPeerKilledWithSeveralInFlightOnOneConnection(t *testing.T) {
	s := startScripted(t)
	p := dialVia(t, Config{MaxConnsPerPeer: 1, Window: 16}, s.ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 8
	out := make(chan result, n)
	for i := 0; i < n; i++ {
		doAsync(ctx, p, i, transfer.Write, pattern(4096), uint64(0x10000*(i+1)), out)
	}
	order := make([]uint64, n) // the order the target read them = the ack order
	for k := range order {
		f := s.next(t)
		if f.conn != 0 {
			t.Fatalf("request on connection %d, want all on one", f.conn)
		}
		order[k] = f.addr
	}
	const acked = 3
	s.send(t, 0, bytes.Repeat(status(statusOK), acked))
	done := map[uint64]bool{}
	for k := 0; k < acked; k++ {
		r := <-out
		if r.err != nil {
			t.Fatalf("request %d: %v before the kill", r.id, r.err)
		}
		done[uint64(0x10000*(r.id+1))] = true
	}
	for k := 0; k < acked; k++ {
		if !done[order[k]] {
			t.Fatalf("completed %v, want the first %d the target read (%x)", done, acked, order[:acked])
		}
	}
	s.close()
	for k := acked; k < n; k++ {
		r := <-out
		if r.err == nil {
			t.Fatalf("request %d reported completed without an acknowledgement", r.id)
		}
		if !strings.Contains(r.err.Error(), "dial") && !strings.Contains(r.err.Error(), "failed") {
			t.Fatalf("request %d: %v, want the connection's or redial's failure", r.id, r.err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("requests hung until the deadline")
	}
}

// TestCancelledRequestSparesItsNeighbours: two requests are in flight on
// one connection and the target answers neither. Cancelling one ends it
// promptly (its connection is dropped, since only that stops the stream
// touching its buffer); the other is resent on a fresh connection and
// completes there.
func TestCancelledRequestSparesItsNeighbours(t *testing.T) {
	s := startScripted(t)
	p := dialVia(t, Config{MaxConnsPerPeer: 1}, s.ln.Addr().String())
	bg, cancelAll := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelAll()
	ctxA, cancelA := context.WithCancel(bg)
	out := make(chan result, 2)
	doAsync(ctxA, p, 0, transfer.Write, pattern(5000), 0xA000, out)
	s.next(t)
	b := pattern(7000)
	doAsync(bg, p, 1, transfer.Write, b, 0xB000, out)
	s.next(t)
	cancelA()
	if r := <-out; r.id != 0 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("request %d ended with %v, want request 0 cancelled", r.id, r.err)
	}
	f := s.next(t) // request 1 again, on a new connection
	if f.conn != 1 || f.addr != 0xB000 || !bytes.Equal(f.payload, b) {
		t.Fatalf("resent request: connection %d addr %#x", f.conn, f.addr)
	}
	s.send(t, 1, status(statusOK))
	if r := <-out; r.id != 1 || r.err != nil {
		t.Fatalf("request %d ended with %v, want request 1 completed", r.id, r.err)
	}
}

// TestStatusWithNothingInFlight: a status frame nobody asked for is a
// protocol error that drops the connection; it completes nothing.
func TestStatusWithNothingInFlight(t *testing.T) {
	s := startScripted(t)
	p := dialVia(t, Config{MaxConnsPerPeer: 1}, s.ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := make(chan result, 1)
	doAsync(ctx, p, 0, transfer.Write, pattern(100), 0x1000, out)
	s.next(t)
	s.send(t, 0, status(statusOK))
	if r := <-out; r.err != nil {
		t.Fatal(r.err)
	}
	p.mu.Lock()
	m := p.mu.conns[0]
	p.mu.Unlock()
	s.send(t, 0, status(statusOK)) // unsolicited
	select {
	case <-m.dead:
	case <-ctx.Done():
		t.Fatal("connection kept after an unsolicited status frame")
	}
	doAsync(ctx, p, 1, transfer.Write, pattern(100), 0x2000, out)
	if f := s.next(t); f.conn != 1 {
		t.Fatalf("next request on connection %d, want a new one", f.conn)
	}
	s.send(t, 1, status(statusOK))
	if r := <-out; r.err != nil {
		t.Fatal(r.err)
	}
}

// TestManyRequestsOneConnection: requests of mixed sizes and directions
// from many goroutines share one connection (several in flight at once);
// each completes with its own bytes, against a real target.
func TestManyRequestsOneConnection(t *testing.T) {
	tr, r := target(t, 8<<20)
	p := dialVia(t, Config{MaxConnsPerPeer: 1, Window: 32}, tr.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sizes := []int{1, 100, 4096, 64 << 10, 100 << 10, 300 << 10}
	src := pattern(8 << 20)
	var wg sync.WaitGroup
	errs := make(chan error, 256)
	off := 0
	for i := 0; off < 4<<20; i++ {
		n := sizes[i%len(sizes)]
		o := off
		off += n
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Do(ctx, transfer.Write, src[o:o+n], r.Addr()+uint64(o)); err != nil {
				errs <- err
				return
			}
			got := make([]byte, n)
			if err := p.Do(ctx, transfer.Read, got, r.Addr()+uint64(o)); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, src[o:o+n]) {
				errs <- fmt.Errorf("[%d,+%d) read back differs", o, n)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if d := p.dials.Load(); d != 1 {
		t.Fatalf("%d dials, want every request on one connection", d)
	}
}

// TestTargetDropsEveryConnection: the target accepts and closes every
// connection before reading anything. Requests fail after RetryCount
// attempts, naming the cause, and never loop on fresh connections.
func TestTargetDropsEveryConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	p := dialVia(t, Config{RetryCount: 4, MaxConnsPerPeer: 2}, ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := make(chan result, 16)
	for i := 0; i < cap(out); i++ {
		doAsync(ctx, p, i, transfer.Write, pattern(200<<10), uint64(i)<<20, out)
	}
	for i := 0; i < cap(out); i++ {
		r := <-out
		if r.err == nil || ctx.Err() != nil {
			t.Fatalf("request %d: %v (ctx %v), want a failure before the deadline", r.id, r.err, ctx.Err())
		}
		if !strings.Contains(r.err.Error(), "failed 4 times") && !strings.Contains(r.err.Error(), "dial") {
			t.Fatalf("request %d: %v, want the retry limit's cause", r.id, r.err)
		}
	}
}

// TestIdleConnectionClosed: a connection that carried nothing for longer
// than IdleTimeout is closed by the next request, which opens a new one;
// with a long timeout the connection is reused.
func TestIdleConnectionClosed(t *testing.T) {
	tr, r := target(t, 1<<20)
	for _, tc := range []struct {
		idle  time.Duration
		dials int64
	}{{time.Nanosecond, 3}, {time.Hour, 1}} {
		t.Run(tc.idle.String(), func(t *testing.T) {
			p := dialVia(t, Config{IdleTimeout: tc.idle}, tr.Addr().String())
			for i := 0; i < 3; i++ {
				if err := p.Do(context.Background(), transfer.Write, pattern(1000), r.Addr()); err != nil {
					t.Fatal(err)
				}
			}
			if d := p.dials.Load(); d != tc.dials {
				t.Fatalf("%d dials, want %d", d, tc.dials)
			}
		})
	}
}
