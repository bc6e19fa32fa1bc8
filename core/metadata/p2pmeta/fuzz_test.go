package p2pmeta

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/testutil/sockpair"
	"github.com/mooncake-go/mooncake/core/testutil/wiretap"
)

// Fuzzing the handshake channel: the frame decoder (FuzzReadFrame), what
// a peer can send a listener (FuzzHandshakeServe) and what a peer can
// answer a request (FuzzHandshakeReplies). Seeds are the frames two real
// Stores exchanged through a wiretap proxy.

// fzCallLimit bounds one fuzzed exchange.
const fzCallLimit = 10 * time.Second

// fzDesc is the descriptor the fuzzed listener serves.
var fzDesc = metadata.SegmentDesc{Name: "fuzz", Protocol: "tcp", TCPDataPort: 4242, TCPProtoVersion: 2,
	Buffers: []metadata.BufferDesc{{Name: "cpu:0", Addr: 1 << 20, Length: 4096}}}

func fzListen(tb testing.TB) *Store {
	s, err := Listen("", WithIOTimeout(2*time.Second), WithServerTimeout(2*time.Second))
	require.NoError(tb, err)
	tb.Cleanup(func() { s.Close() })
	return s
}

func fzPublish(tb testing.TB, s *Store) {
	d := fzDesc
	d.Name = s.Name()
	require.NoError(tb, metadata.PutSegment(context.Background(), s, "", d))
}

// recordHandshakes runs real exchanges through a wiretap in front of a
// Store: a descriptor fetch, a probe, a notification, and Connection
// frames in the typed and the legacy layout.
func recordHandshakes(tb testing.TB) []wiretap.Recording {
	a, b := fzListen(tb), fzListen(tb)
	fzPublish(tb, a)
	fzPublish(tb, b)
	tap, err := wiretap.Start(b.Name())
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), fzCallLimit)
	defer cancel()
	_, err = metadata.GetSegment(ctx, a, "", tap.Addr())
	require.NoError(tb, err)
	require.NoError(tb, Probe(ctx, tap.Addr()))
	require.NoError(tb, SendNotify(ctx, tap.Addr(), a.Name(), "hello"))
	for _, typ := range []FrameType{FrameConnection, FrameLegacy} {
		c, err := net.Dial("tcp", tap.Addr())
		require.NoError(tb, err)
		c.SetDeadline(time.Now().Add(fzCallLimit))
		require.NoError(tb, WriteFrame(c, typ, []byte(`{"local_nic_path":"127.0.0.1:1@mlx5_0","peer_nic_path":"x@y","qp_num":[1,2]}`)))
		_, _, err = ReadFrame(c, DefaultMaxFrame)
		require.NoError(tb, err)
		c.Close()
	}
	recs := tap.Close()
	require.Len(tb, recs, 5)
	require.Len(tb, b.Notifies(), 1)
	return recs
}

// FuzzReadFrame checks the decoder never panics, fails only with its
// documented errors, and that a frame it accepts is exactly the bytes
// AppendFrame writes for the type and payload it returned.
func FuzzReadFrame(f *testing.F) {
	for _, r := range recordHandshakes(f) {
		f.Add(r.Up)
		f.Add(r.Down)
	}
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<40))
	f.Add(binary.LittleEndian.AppendUint64(nil, 0))
	f.Add(AppendFrame(nil, 9, []byte(`{}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, payload, err := ReadFrame(bytes.NewReader(data), DefaultMaxFrame)
		if err != nil {
			ok := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrBadFrame) || errors.Is(err, ErrFrameTooLarge)
			require.True(t, ok, "undocumented error %v", err)
			return
		}
		n := binary.LittleEndian.Uint64(data)
		require.LessOrEqual(t, n, uint64(DefaultMaxFrame))
		require.Equal(t, data[:headerLen+n], AppendFrame(nil, typ, payload))
	})
}

// expectHandshakes is the reference listener: the replies s must write to
// stream (one frame per request, in order, until the first frame it must
// refuse) and the notifications it must queue.
func expectHandshakes(stream []byte, desc []byte) (out []byte, notes []Notify) {
	r := bytes.NewReader(stream)
	for {
		typ, p, err := ReadFrame(r, DefaultMaxFrame)
		if err != nil || !json.Valid(p) {
			return out, notes
		}
		var reply string
		switch typ {
		case FrameConnection, FrameLegacy:
			reply = `{"reply_msg":"p2p: this endpoint does not set up RDMA connections"}`
		case FrameMetadata:
			reply = string(desc)
		case FrameNotify:
			var n Notify
			if json.Unmarshal(p, &n) != nil {
				return out, notes
			}
			notes = append(notes, n)
			reply = `{"notify_msg":"success"}`
		case FrameProbe:
			reply = `{"status":"success"}`
		}
		out = AppendFrame(out, typ, []byte(reply))
	}
}

// FuzzHandshakeServe feeds a listener's connection arbitrary bytes and
// checks its answers against the reference listener: the same reply
// frames, the same queued notifications, and the connection served to
// its end within fzCallLimit.
func FuzzHandshakeServe(f *testing.F) {
	for _, r := range recordHandshakes(f) {
		f.Add(r.Up)
	}
	f.Add(append(AppendFrame(nil, FrameProbe, []byte(`{}`)), AppendFrame(nil, FrameNotify, []byte(`{"name":1}`))...))
	f.Add(AppendFrame(nil, FrameNotify, []byte(`"x"`)))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))

	s := fzListen(f)
	fzPublish(f, s)
	desc, err := s.Get(context.Background(), metadata.SegmentKey("", s.Name()))
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, stream []byte) {
		s.Notifies() // empty the queue
		wantOut, wantNotes := expectHandshakes(stream, desc)
		cli, srv := sockpair.New(t)
		defer cli.Close()
		go func() {
			cli.Write(stream) // fails once serve closed the connection
			cli.CloseWrite()
		}()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer srv.Close()
			s.serve(srv)
		}()
		got, _ := io.ReadAll(cli)
		select {
		case <-done:
		case <-time.After(fzCallLimit):
			t.Fatalf("serve did not return within %v", fzCallLimit)
		}
		require.Equal(t, string(wantOut), string(got))
		if notes := s.Notifies(); len(notes)+len(wantNotes) > 0 {
			require.Equal(t, wantNotes, notes)
		}
	})
}

// fzPeer is a fake handshake peer: it reads one frame per connection and
// answers with the current reply bytes, then closes.
type fzPeer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	reply []byte
}

func startPeer(tb testing.TB) *fzPeer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	p := &fzPeer{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			reply := p.reply
			p.mu.Unlock()
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(fzCallLimit))
				if _, _, err := ReadFrame(c, DefaultMaxFrame); err == nil {
					c.Write(reply)
				}
			}()
		}
	}()
	tb.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

// FuzzHandshakeReplies answers a descriptor fetch, a probe or a
// notification with arbitrary bytes and checks the request ends within
// fzCallLimit, and that success means what it says: Get returns a
// non-empty JSON object, Probe and SendNotify saw their success reply.
func FuzzHandshakeReplies(f *testing.F) {
	for i, r := range recordHandshakes(f) {
		f.Add(r.Down, uint8(i))
	}
	f.Add(AppendFrame(nil, FrameMetadata, []byte(`{}`)), uint8(0))
	f.Add(AppendFrame(nil, FrameMetadata, []byte(` {"a":1} `)), uint8(0))
	f.Add(AppendFrame(nil, FrameProbe, []byte(`{"status":"success"`)), uint8(1))
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<20), uint8(2))

	s := fzListen(f)
	fzPublish(f, s)
	peer := startPeer(f)
	addr := peer.ln.Addr().String()
	opts := []Option{WithIOTimeout(2 * time.Second), WithConnectTimeout(2 * time.Second)}
	f.Fuzz(func(t *testing.T, reply []byte, kind uint8) {
		peer.mu.Lock()
		peer.reply = reply
		peer.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), fzCallLimit)
		defer cancel()
		var err error
		switch kind % 3 {
		case 0:
			var v []byte
			v, err = s.Get(ctx, metadata.SegmentKey("", addr))
			if err == nil {
				var m map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(v, &m), "Get returned %q", v)
				require.NotEmpty(t, m, "Get returned an empty object")
			}
		case 1:
			if err = Probe(ctx, addr, opts...); err == nil {
				require.Contains(t, string(reply), `"success"`)
			}
		case 2:
			if err = SendNotify(ctx, addr, "fuzz", "msg", opts...); err == nil {
				require.Contains(t, string(reply), `"success"`)
			}
		}
		require.False(t, errors.Is(err, context.DeadlineExceeded), "request did not end within %v: %v", fzCallLimit, err)
	})
}
