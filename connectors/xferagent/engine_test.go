package xferagent

import (
	"bytes"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// agentT is one engine with a registered DRAM buffer, as an agent holds it.
type agentT struct {
	e   *Engine
	buf []byte
	reg uint64
}

func addrOf(b []byte) uint64 { return memory.AddrOf(b) }

func newAgent(t *testing.T, name string, size int, params ...string) *agentT {
	t.Helper()
	// Off-heap memory, as NIXL's callers register: the race detector
	// does not see the happens-before a tcp acknowledgement carries.
	// Unmapped after the engine closed (cleanups run last first).
	rg, err := memory.Map(size)
	require.NoError(t, err)
	t.Cleanup(func() { rg.Close() })
	ps := map[string]string{ParamIPAddr: "127.0.0.1"}
	for i := 0; i+1 < len(params); i += 2 {
		ps[params[i]] = params[i+1]
	}
	e, err := New(Config{Agent: name, Params: ps})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	buf := rg.Bytes()
	reg, err := e.Register(buf, addrOf(buf), uint64(size), 0, MemDRAM)
	require.NoError(t, err)
	return &agentT{e: e, buf: buf, reg: reg}
}

// exchange loads b's connection info and registration into a, as NIXL's
// loadRemoteMD does, and returns a's metadata id for b's buffer.
func exchange(t *testing.T, a, b *agentT) uint64 {
	t.Helper()
	require.NoError(t, a.e.LoadRemoteConnInfo(b.e.Agent(), b.e.ConnInfo()))
	pub, err := b.e.PublicData(b.reg)
	require.NoError(t, err)
	require.NotEmpty(t, pub)
	md, err := a.e.LoadRemoteMD(addrOf(b.buf), uint64(len(b.buf)), 0, MemDRAM, pub, b.e.Agent())
	require.NoError(t, err)
	return md
}

// waitDone polls CheckXfer until the request finished (bounded).
func waitDone(t *testing.T, e *Engine, req uint64) error {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		done, err := e.CheckXfer(req)
		if done || err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("request %d still running after a minute", req)
	return nil
}

// waitNotifs polls Notifs until n arrived (bounded).
func waitNotifs(t *testing.T, e *Engine, n int) []Notif {
	t.Helper()
	var got []Notif
	deadline := time.Now().Add(time.Minute)
	for len(got) < n && time.Now().Before(deadline) {
		got = append(got, e.Notifs()...)
		if len(got) < n {
			time.Sleep(time.Millisecond)
		}
	}
	require.Len(t, got, n)
	return got
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// TestWriteReadWithNotification runs over both paths: CMA (the default
// between two engines of one host; here of one process) and tcp.
func TestWriteReadWithNotification(t *testing.T) {
	for _, cma := range []string{"auto", "off"} {
		t.Run("cma="+cma, func(t *testing.T) { testWriteRead(t, cma) })
	}
}

func testWriteRead(t *testing.T, cma string) {
	a := newAgent(t, "A", 1<<20, ParamCMA, cma)
	b := newAgent(t, "B\x00bin", 1<<20, ParamCMA, cma)
	rmd := exchange(t, a, b)
	fill(a.buf, 3)

	// Three descriptors at different offsets and sizes, WRITE A -> B.
	sizes := []uint64{1, 4096, 300000}
	var local, remote []Desc
	off := uint64(0)
	for _, n := range sizes {
		local = append(local, Desc{Addr: addrOf(a.buf) + off, Len: n, MD: a.reg})
		remote = append(remote, Desc{Addr: addrOf(b.buf) + off + 7, Len: n, MD: rmd})
		off += n + 100
	}
	req, err := a.e.PrepXfer(1, MemDRAM, local, MemDRAM, remote, b.e.Agent())
	require.NoError(t, err)
	msg := []byte("done\x00\xff\x01")
	_, err = a.e.PostXfer(req, 1, local, remote, msg)
	require.NoError(t, err)
	require.NoError(t, waitDone(t, a.e, req))
	off = 0
	for _, n := range sizes {
		require.True(t, bytes.Equal(a.buf[off:off+n], b.buf[off+7:off+7+n]), "descriptor of %d bytes", n)
		off += n + 100
	}
	got := waitNotifs(t, b.e, 1)
	assert.Equal(t, "A", got[0].Agent)
	assert.Equal(t, msg, got[0].Msg)

	// Repost the same handle as a fresh transfer after new data, then READ back.
	fill(a.buf, 11)
	_, err = a.e.PostXfer(req, 1, local, remote, nil)
	require.NoError(t, err)
	require.NoError(t, waitDone(t, a.e, req))
	assert.Empty(t, b.e.Notifs(), "a post without a notification sends none")
	require.NoError(t, a.e.ReleaseReq(req))
	require.ErrorIs(t, a.e.ReleaseReq(req), ErrNotFound, "release exactly once")

	clear(a.buf)
	rd, err := a.e.PrepXfer(0, MemDRAM, local, MemDRAM, remote, b.e.Agent())
	require.NoError(t, err)
	_, err = a.e.PostXfer(rd, 0, local, remote, []byte{})
	require.NoError(t, err)
	require.NoError(t, waitDone(t, a.e, rd))
	off = 0
	for _, n := range sizes {
		require.True(t, bytes.Equal(a.buf[off:off+n], b.buf[off+7:off+7+n]))
		off += n + 100
	}
	got = waitNotifs(t, b.e, 1)
	assert.Equal(t, []byte{}, got[0].Msg, "an empty notification arrives as empty")
	viaCMA, viaTCP := a.e.Paths()
	if cma == "off" {
		assert.Equal(t, [2]int64{0, 3}, [2]int64{viaCMA, viaTCP})
	} else {
		assert.Equal(t, [2]int64{3, 0}, [2]int64{viaCMA, viaTCP})
	}
}

// TestCMARefusesStaleRanges: a range the target deregistered since the
// initiator loaded its metadata is not written by CMA; the post goes over
// tcp, whose target refuses it, and nothing lands.
func TestCMARefusesStaleRanges(t *testing.T) {
	a := newAgent(t, "A", 8192)
	b := newAgent(t, "B", 8192)
	rmd := exchange(t, a, b)
	fill(a.buf, 1)
	l := []Desc{{Addr: addrOf(a.buf), Len: 4096, MD: a.reg}}
	r := []Desc{{Addr: addrOf(b.buf), Len: 4096, MD: rmd}}
	req, err := a.e.PrepXfer(1, MemDRAM, l, MemDRAM, r, "B")
	require.NoError(t, err)
	_, err = a.e.PostXfer(req, 1, l, r, nil)
	require.NoError(t, err)
	require.NoError(t, waitDone(t, a.e, req))
	require.Equal(t, a.buf[:4096], b.buf[:4096])
	viaCMA, _ := a.e.Paths()
	require.Equal(t, int64(1), viaCMA)

	require.NoError(t, b.e.Deregister(b.reg))
	fill(a.buf, 9)
	_, err = a.e.PostXfer(req, 1, l, r, nil)
	if err == nil {
		err = waitDone(t, a.e, req)
	}
	require.Error(t, err, "a deregistered target range is refused")
	viaCMA, viaTCP := a.e.Paths()
	assert.Equal(t, [2]int64{1, 1}, [2]int64{viaCMA, viaTCP}, "the second post went over tcp")
	assert.NotEqual(t, a.buf[:4096], b.buf[:4096], "nothing landed")
}

func TestBadDescriptors(t *testing.T) {
	a := newAgent(t, "A", 4096)
	b := newAgent(t, "B", 4096)
	rmd := exchange(t, a, b)
	l := Desc{Addr: addrOf(a.buf), Len: 4096, MD: a.reg}
	r := Desc{Addr: addrOf(b.buf), Len: 4096, MD: rmd}

	cases := map[string]struct {
		l, r  Desc
		agent string
		want  error
	}{
		"local past registration":  {Desc{Addr: l.Addr + 1, Len: 4096, MD: a.reg}, r, "B", ErrInvalidParam},
		"remote past registration": {l, Desc{Addr: r.Addr + 1, Len: 4096, MD: rmd}, "B", ErrInvalidParam},
		"remote below":             {l, Desc{Addr: r.Addr - 4096, Len: 4096, MD: rmd}, "B", ErrInvalidParam},
		"unknown local md":         {Desc{Addr: l.Addr, Len: 4096, MD: 999}, r, "B", ErrInvalidParam},
		"remote md as local":       {Desc{Addr: r.Addr, Len: 4096, MD: rmd}, r, "B", ErrInvalidParam},
		"length mismatch":          {Desc{Addr: l.Addr, Len: 10, MD: a.reg}, r, "B", ErrInvalidParam},
		"zero length":              {Desc{Addr: l.Addr, Len: 0, MD: a.reg}, Desc{Addr: r.Addr, MD: rmd}, "B", ErrInvalidParam},
		"unknown agent":            {l, r, "C", ErrNotFound},
		"wrong device":             {Desc{Addr: l.Addr, Len: 4096, DevID: 1, MD: a.reg}, r, "B", ErrInvalidParam},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := a.e.PrepXfer(1, MemDRAM, []Desc{c.l}, MemDRAM, []Desc{c.r}, c.agent)
			require.ErrorIs(t, err, c.want)
		})
	}
	_, err := a.e.PrepXfer(2, MemDRAM, []Desc{l}, MemDRAM, []Desc{r}, "B")
	require.ErrorIs(t, err, ErrInvalidParam, "operation 2")
	_, err = a.e.PrepXfer(1, MemDRAM, []Desc{l}, MemDRAM, nil, "B")
	require.ErrorIs(t, err, ErrInvalidParam, "list lengths")

	// A good request posted with a changed, bad list is refused at post.
	req, err := a.e.PrepXfer(1, MemDRAM, []Desc{l}, MemDRAM, []Desc{r}, "B")
	require.NoError(t, err)
	_, err = a.e.PostXfer(req, 1, []Desc{l}, []Desc{{Addr: r.Addr + 8, Len: 4096, MD: rmd}}, nil)
	require.ErrorIs(t, err, ErrInvalidParam)
	_, err = a.e.PostXfer(req, 0, []Desc{l}, []Desc{r}, nil)
	require.ErrorIs(t, err, ErrInvalidParam, "posted with another op")
	_, err = a.e.PostXfer(12345, 1, []Desc{l}, []Desc{r}, nil)
	require.ErrorIs(t, err, ErrNotFound)

	// Blobs that are not ours.
	_, err = a.e.LoadRemoteMD(r.Addr, 4096, 0, MemDRAM, []byte("xx"), "B")
	require.ErrorIs(t, err, ErrMismatch)
	pub, _ := b.e.PublicData(b.reg)
	_, err = a.e.LoadRemoteMD(r.Addr, 8192, 0, MemDRAM, pub, "B")
	require.ErrorIs(t, err, ErrMismatch, "range larger than the registration")
	_, err = a.e.LoadRemoteMD(r.Addr, 4096, 0, MemDRAM, pub, "C")
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorIs(t, a.e.LoadRemoteConnInfo("B", "mcgo-nixl1:127.0.0.1:1"), ErrNotAllowed)
	require.ErrorIs(t, a.e.LoadRemoteConnInfo("D", "ucx:whatever"), ErrMismatch)

	// Memory types.
	_, err = a.e.Register(nil, 0x10000, 4096, 0, MemVRAM)
	require.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), "unsupported")
	_, err = a.e.Register(nil, 0x10000, 4096, 0, MemFILE)
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = New(Config{Agent: "X", Params: map[string]string{"bogus": "1"}})
	require.ErrorIs(t, err, ErrInvalidParam)
	assert.Contains(t, err.Error(), "bogus")
}

func TestLoopbackAndGenNotif(t *testing.T) {
	a := newAgent(t, "A", 8192)
	self, err := a.e.LoadLocalMD(a.reg)
	require.NoError(t, err)
	require.NoError(t, a.e.Connect("A"))
	fill(a.buf[:4096], 5)
	l := Desc{Addr: addrOf(a.buf), Len: 4096, MD: a.reg}
	r := Desc{Addr: addrOf(a.buf) + 4096, Len: 4096, MD: self}
	req, err := a.e.PrepXfer(1, MemDRAM, []Desc{l}, MemDRAM, []Desc{r}, "A")
	require.NoError(t, err)
	_, err = a.e.PostXfer(req, 1, []Desc{l}, []Desc{r}, []byte("self"))
	require.NoError(t, err)
	require.NoError(t, waitDone(t, a.e, req))
	require.Equal(t, a.buf[:4096], a.buf[4096:])
	got := waitNotifs(t, a.e, 1)
	assert.Equal(t, Notif{Agent: "A", Msg: []byte("self")}, got[0])

	b := newAgent(t, "B", 4096)
	exchange(t, a, b)
	require.NoError(t, a.e.GenNotif("B", []byte{0, 1, 2}))
	got = waitNotifs(t, b.e, 1)
	assert.Equal(t, Notif{Agent: "A", Msg: []byte{0, 1, 2}}, got[0])
	// B never loaded A's metadata: genNotif back needs it.
	require.ErrorIs(t, b.e.GenNotif("A", []byte("x")), ErrNotFound)

	// Teardown order of an agent: deregister, then unload the alias.
	require.NoError(t, a.e.Deregister(a.reg))
	require.NoError(t, a.e.UnloadMD(self))
	require.NoError(t, a.e.UnloadMD(self), "unknown ids are fine")
	require.ErrorIs(t, a.e.Deregister(a.reg), ErrNotFound)
}

func TestDisconnectAndDeadPeer(t *testing.T) {
	a := newAgent(t, "A", 4096)
	b := newAgent(t, "B", 4096)
	rmd := exchange(t, a, b)
	require.NoError(t, a.e.Connect("B"))
	require.NoError(t, a.e.Disconnect("B"))
	require.NoError(t, a.e.Disconnect("B"), "unknown agent")
	_, err := a.e.PrepXfer(1, MemDRAM, []Desc{{Addr: addrOf(a.buf), Len: 16, MD: a.reg}}, MemDRAM, []Desc{{Addr: addrOf(b.buf), Len: 16, MD: rmd}}, "B")
	require.ErrorIs(t, err, ErrNotFound, "a disconnected agent is unknown until reloaded")

	rmd = exchange(t, a, b)
	l := []Desc{{Addr: addrOf(a.buf), Len: 16, MD: a.reg}}
	r := []Desc{{Addr: addrOf(b.buf), Len: 16, MD: rmd}}
	req, err := a.e.PrepXfer(1, MemDRAM, l, MemDRAM, r, "B")
	require.NoError(t, err)
	require.NoError(t, b.e.Close())
	_, err = a.e.PostXfer(req, 1, l, r, nil)
	require.ErrorIs(t, err, ErrRemoteDisconnect, "a post to a closed peer fails at once")
	done, cerr := a.e.CheckXfer(req)
	assert.True(t, done)
	require.Error(t, cerr, "the failure stays visible")
	require.NoError(t, a.e.ReleaseReq(req))
}

func TestPackNotifs(t *testing.T) {
	in := []Notif{{Agent: "A", Msg: []byte{0}}, {Agent: "", Msg: nil}, {Agent: "long\x00name", Msg: bytes.Repeat([]byte{9}, 5000)}}
	out, err := UnpackNotifs(PackNotifs(in))
	require.NoError(t, err)
	require.Len(t, out, 3)
	assert.Equal(t, in[0], out[0])
	assert.Equal(t, "", out[1].Agent)
	assert.Empty(t, out[1].Msg)
	assert.Equal(t, in[2], out[2])
	_, err = UnpackNotifs([]byte{5, 0, 0, 0, 'a'})
	require.ErrorIs(t, err, ErrMismatch)
}

func TestMerge(t *testing.T) {
	l := []Desc{{Addr: 100, Len: 10, MD: 1}, {Addr: 110, Len: 5, MD: 1}, {Addr: 115, Len: 5, MD: 2}, {Addr: 200, Len: 5, MD: 2}, {Addr: 205, Len: 5, MD: 2}}
	r := []Desc{{Addr: 1000, Len: 10, MD: 7}, {Addr: 1010, Len: 5, MD: 7}, {Addr: 1015, Len: 5, MD: 7}, {Addr: 1020, Len: 5, MD: 7}, {Addr: 1026, Len: 5, MD: 7}}
	reqs := make([]transfer.Request, len(l))
	for i := range l {
		reqs[i] = transfer.Request{Source: l[i].Addr, TargetOffset: r[i].Addr, Length: l[i].Len}
	}
	got := merge(l, r, reqs)
	want := []transfer.Request{
		{Source: 100, TargetOffset: 1000, Length: 15}, // 0+1 continue on both sides
		{Source: 115, TargetOffset: 1015, Length: 5},  // another local registration
		{Source: 200, TargetOffset: 1020, Length: 5},  // local gap
		{Source: 205, TargetOffset: 1026, Length: 5},  // remote gap
	}
	assert.Equal(t, want, got)
}

// TestRawRequests: TensorRT-LLM's requests name remote ranges without
// metadata ids; the target's registrations decide, on both paths, and a
// registration made after the peer was loaded is found.
func TestRawRequests(t *testing.T) {
	for _, cma := range []string{"auto", "off"} {
		t.Run("cma="+cma, func(t *testing.T) {
			a := newAgent(t, "ctx", 8192, ParamCMA, cma)
			b := newAgent(t, "gen", 8192, ParamCMA, cma)
			require.NoError(t, a.e.LoadRemoteConnInfo("gen", b.e.ConnInfo()))
			require.NoError(t, b.e.LoadRemoteConnInfo("ctx", a.e.ConnInfo()))
			fill(a.buf, 4)
			l := []Desc{{Addr: addrOf(a.buf) + 100, Len: 3000}}
			r := []Desc{{Addr: addrOf(b.buf) + 5000, Len: 3000}}
			assert.True(t, a.e.CoversRemote("gen", MemDRAM, r))
			assert.False(t, a.e.CoversRemote("gen", MemDRAM, []Desc{{Addr: addrOf(b.buf) + 8000, Len: 1000}}))
			assert.False(t, a.e.CoversRemote("nobody", MemDRAM, r))
			req, err := a.e.PrepRaw(1, MemDRAM, l, MemDRAM, r, "gen")
			require.NoError(t, err)
			_, err = a.e.PostXfer(req, 1, l, r, []byte("kv\x00ready"))
			require.NoError(t, err)
			require.NoError(t, waitDone(t, a.e, req))
			require.Equal(t, a.buf[100:3100], b.buf[5000:8000])
			got := waitNotifs(t, b.e, 1)
			assert.Equal(t, Notif{Agent: "ctx", Msg: []byte("kv\x00ready")}, got[0])
			require.NoError(t, a.e.ReleaseReq(req))

			// A range past the target's registration is refused by it.
			bad := []Desc{{Addr: addrOf(b.buf) + 8000, Len: 1000}}
			req, err = a.e.PrepRaw(1, MemDRAM, []Desc{{Addr: addrOf(a.buf), Len: 1000}}, MemDRAM, bad, "gen")
			require.NoError(t, err, "remote ranges are the target's to check")
			_, err = a.e.PostXfer(req, 1, []Desc{{Addr: addrOf(a.buf), Len: 1000}}, bad, nil)
			if err == nil {
				err = waitDone(t, a.e, req)
			}
			require.Error(t, err)
			// A local range outside every registration is refused at once.
			_, err = a.e.PrepRaw(1, MemDRAM, []Desc{{Addr: addrOf(a.buf) + 8000, Len: 1000}}, MemDRAM, r, "gen")
			require.ErrorIs(t, err, ErrInvalidParam)

			// A registration made after the peer was loaded.
			rg, err := memory.Map(4096)
			require.NoError(t, err)
			defer rg.Close()
			_, err = b.e.Register(rg.Bytes(), rg.Addr(), 4096, 0, MemDRAM)
			require.NoError(t, err)
			r2 := []Desc{{Addr: rg.Addr(), Len: 3000}}
			assert.True(t, a.e.CoversRemote("gen", MemDRAM, r2))
			req, err = a.e.PrepRaw(1, MemDRAM, l, MemDRAM, r2, "gen")
			require.NoError(t, err)
			_, err = a.e.PostXfer(req, 1, l, r2, nil)
			require.NoError(t, err)
			require.NoError(t, waitDone(t, a.e, req))
			require.Equal(t, a.buf[100:3100], rg.Bytes()[:3000])
		})
	}
}
