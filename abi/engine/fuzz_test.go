package engine

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// fzPage is the size of every region and guard page of the fuzzed
// engines.
const fzPage = 4096

// fzSide is one engine and its slab of five pages:
//
//	guard | first buffer | guard | second buffer | guard
type fzSide struct {
	e      *teEngine
	slab   *memory.Region
	remote [2]bool // whether each buffer was registered remote-accessible
}

func (s *fzSide) buf(i int) uint64 { return s.slab.Addr() + uint64(1+2*i)*fzPage }

func newFzSide(tb testing.TB, meta, name string, remote [2]bool) *fzSide {
	e, err := newEngine(engineArgs{Conn: meta, Name: name, Host: "127.0.0.1", Env: map[string]string{}})
	require.NoError(tb, err)
	tb.Cleanup(func() { e.destroy() })
	slab, err := memory.Map(5 * fzPage)
	require.NoError(tb, err)
	tb.Cleanup(func() { slab.Close() })
	s := &fzSide{e: e, slab: slab, remote: remote}
	for i := range 2 {
		off := (1 + 2*i) * fzPage
		require.NoError(tb, e.register(slab.Bytes()[off:off+fzPage], "cpu:0", remote[i]))
	}
	return s
}

// fill gives the slab a pattern that differs per side and page.
func (s *fzSide) fill(seed byte) {
	for i := range s.slab.Bytes() {
		s.slab.Bytes()[i] = byte(i*7) ^ seed ^ byte(i/fzPage)
	}
}

// inside reports whether [addr, addr+n) is inside one of s's buffers
// (only remote-accessible ones, if remoteOnly).
func (s *fzSide) inside(addr, n uint64, remoteOnly bool) bool {
	for i := range 2 {
		lo := s.buf(i)
		if n > 0 && addr >= lo && addr-lo < fzPage && n <= fzPage-(addr-lo) && (s.remote[i] || !remoteOnly) {
			return true
		}
	}
	return false
}

// FuzzSubmit submits batches of fuzzed requests (opcode as C passes it,
// source, target segment, target offset, length) through mc_te_submit's
// Go layer, from engine a to engine b and to a's own segment, and checks
// every task's outcome against a reference of what is registered: a task
// completes exactly when its opcode is READ or WRITE, its length is not
// 0, its source lies in one of a's buffers and its target range in one of
// the target's remote-accessible buffers; it never touches a guard page
// or a buffer that is not remote-accessible on the target side. Fuzzed
// addresses are relative to the slabs (see addr), so every address stays
// reachable.
func FuzzSubmit(f *testing.F) {
	// One request per 12 bytes: op, source page, source offset (2),
	// target, target page, target offset (2), length (2), spare (2).
	req := func(op, sp byte, so uint16, tg, tp byte, to uint16, n uint16) []byte {
		return []byte{op, sp, byte(so), byte(so >> 8), tg, tp, byte(to), byte(to >> 8), byte(n), byte(n >> 8), 0, 0}
	}
	f.Add(req(1, 1, 0, 1, 1, 0, fzPage))                                 // write a's first buffer to b's
	f.Add(req(0, 3, 16, 1, 1, 8, 100))                                   // read from b into a's second buffer
	f.Add(req(1, 1, 0, 1, 3, 0, 64))                                     // b's second buffer is not remote-accessible
	f.Add(req(1, 1, 0, 0, 3, 0, 64))                                     // a's own second buffer (remote-accessible)
	f.Add(req(0, 1, 0, 0, 1, 0, 64))                                     // a's own first buffer (local only)
	f.Add(req(1, 1, fzPage-1, 1, 1, 0, 2))                               // source crosses into a guard
	f.Add(req(1, 1, 0, 1, 1, fzPage-1, 2))                               // target crosses into a guard
	f.Add(append(req(7, 1, 0, 1, 1, 0, 1), req(1, 1, 0, 9, 1, 0, 0)...)) // bad opcode, unknown segment
	f.Add(req(1, 0, 0, 1, 2, 0, 1))                                      // guard pages

	srv := httptest.NewServer(httpmeta.NewHandler(memmeta.New()))
	f.Cleanup(srv.Close)
	meta := srv.URL + "/metadata"
	a := newFzSide(f, meta, "a", [2]bool{false, true})
	b := newFzSide(f, meta, "b", [2]bool{true, false})
	peer, err := a.e.openSegment("b")
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, data []byte) {
		a.fill(0x11)
		b.fill(0x22)
		beforeA, beforeB := bytes.Clone(a.slab.Bytes()), bytes.Clone(b.slab.Bytes())
		var reqs []transfer.Request
		var want []bool
		for len(data) >= 12 && len(reqs) < 8 {
			d := data[:12]
			data = data[12:]
			target := transfer.LocalSegment
			side := a
			switch d[4] % 3 {
			case 1:
				target, side = transfer.SegmentID(peer), b
			case 2:
				target = transfer.SegmentID(peer) + 1 + transfer.SegmentID(d[4]) // never opened
			}
			// addr: page (0..4) of the slab plus an offset, wrapping; the
			// spare bytes move it anywhere.
			addr := func(s *fzSide, page byte, off uint16) uint64 {
				return s.slab.Addr() + uint64(page%5)*fzPage + uint64(off) + uint64(d[10])<<40 + uint64(d[11])<<56
			}
			r := transfer.Request{
				Op:           opcode(int64(int8(d[0]))),
				Source:       addr(a, d[1], uint16(d[2])|uint16(d[3])<<8),
				Target:       target,
				TargetOffset: addr(side, d[5], uint16(d[6])|uint16(d[7])<<8),
				Length:       uint64(uint16(d[8]) | uint16(d[9])<<8),
			}
			ok := (r.Op == transfer.Read || r.Op == transfer.Write) && r.Length > 0 &&
				a.inside(r.Source, r.Length, false) && d[4]%3 != 2 && side.inside(r.TargetOffset, r.Length, true)
			reqs = append(reqs, r)
			want = append(want, ok)
		}
		if len(reqs) == 0 {
			return
		}
		batch, err := a.e.allocateBatch(uint64(len(reqs)))
		require.NoError(t, err)
		defer a.e.freeBatch(batch)
		require.NoError(t, a.e.submit(batch, reqs))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = a.e.e.Wait(ctx, transfer.BatchID(batch))
		require.NoError(t, err, "batch did not finish")
		for i := range reqs {
			st, err := a.e.status(batch, uint64(i))
			require.NoError(t, err)
			if want[i] {
				require.Equal(t, transfer.StatusCompleted, st.Status, "task %d %+v: %v", i, reqs[i], st.Err)
				require.Equal(t, reqs[i].Length, st.TransferredBytes)
			} else {
				require.Equal(t, transfer.StatusFailed, st.Status, "task %d %+v", i, reqs[i])
			}
		}
		_, err = a.e.status(batch, uint64(len(reqs)))
		require.Error(t, err, "status of a task never submitted")
		// Guard pages and b's local-only buffer never change; a's pages
		// change only inside its buffers (a READ lands there).
		for p := 0; p < 5; p++ {
			pa, pb := a.slab.Bytes()[p*fzPage:(p+1)*fzPage], b.slab.Bytes()[p*fzPage:(p+1)*fzPage]
			if p%2 == 0 {
				require.True(t, bytes.Equal(beforeA[p*fzPage:(p+1)*fzPage], pa), "a's guard page %d was written", p)
				require.True(t, bytes.Equal(beforeB[p*fzPage:(p+1)*fzPage], pb), "b's guard page %d was written", p)
			}
			if p == 3 {
				require.True(t, bytes.Equal(beforeB[p*fzPage:(p+1)*fzPage], pb), "b's local-only buffer was written")
			}
		}
	})
}
