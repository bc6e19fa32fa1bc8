// Package transfertest is the conformance suite every transfer transport
// passes: the same tests run over tcp and loopback engines, and over every
// metadata mode (one shared store, or one P2P store per engine via
// RunBackend).
package transfertest

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// NewTransport returns a fresh transport for one engine.
type NewTransport func(t testing.TB) transfer.Transport

// Backend gives each engine of a test its metadata store. Called with a
// logical segment name ("seg-a", "seg-b"), it returns the segment name the
// engine must use and the store it publishes to and reads from. A backend
// with one shared store returns (logical, store); a P2P backend starts a
// store per engine and returns the name that store dictates ("host:port").
// Cleanups go on t.
//
// The suite also calls it with UnknownSegment, for which it creates no
// engine: the backend must then return a name under which no descriptor is
// (or will be) published; the store returned is ignored.
type Backend func(t testing.TB, logical string) (name string, meta metadata.Store)

// UnknownSegment is the logical name the suite resolves through a Backend to
// get a segment name that nothing publishes.
const UnknownSegment = "no-such-segment"

// SharedBackend returns a Backend that gives every engine meta and uses the
// logical names as segment names.
func SharedBackend(meta metadata.Store) Backend {
	return func(_ testing.TB, logical string) (string, metadata.Store) { return logical, meta }
}

// Pair is two engines, each with a registered 1 MiB region, and a's handle
// for b's segment.
type Pair struct {
	A, B    *transfer.Engine
	RA, RB  *memory.Region
	BHandle transfer.SegmentID
	// NameA and NameB are the engines' segment names as the backend
	// assigned them ("seg-a" and "seg-b" with a shared store).
	NameA, NameB string
	// Meta is A's metadata store (with a shared store, both engines'); MetaB
	// is B's.
	Meta, MetaB metadata.Store
	Background  context.Context

	backend Backend
}

// NewPair builds a Pair of engines sharing meta, named "seg-a" and "seg-b";
// everything is closed by t.Cleanup.
func NewPair(t testing.TB, meta metadata.Store, nt NewTransport) *Pair {
	t.Helper()
	return NewPairBackend(t, SharedBackend(meta), nt)
}

// NewPairBackend builds a Pair whose engines get their names and stores from
// b (logical names "seg-a" and "seg-b"); everything is closed by t.Cleanup.
func NewPairBackend(t testing.TB, b Backend, nt NewTransport) *Pair {
	t.Helper()
	ctx := context.Background()
	p := &Pair{Background: ctx, backend: b}
	mk := func(logical string) (*transfer.Engine, *memory.Region, string, metadata.Store) {
		name, meta := b(t, logical)
		e, err := transfer.New(ctx, transfer.Config{Name: name, Metadata: meta, Transport: nt(t), RequestTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("engine %s (%s): %v", logical, name, err)
		}
		r, err := memory.MapShared(1<<20, logical) // memfd-backed: shm can hand the file to its peer
		if err != nil {
			t.Fatal(err)
		}
		if err := e.RegisterRegion(ctx, r, "cpu:0", true); err != nil {
			t.Fatalf("register %s (%s): %v", logical, name, err)
		}
		t.Cleanup(func() {
			e.Close()
			r.Close()
		})
		return e, r, name, meta
	}
	p.A, p.RA, p.NameA, p.Meta = mk("seg-a")
	p.B, p.RB, p.NameB, p.MetaB = mk("seg-b")
	id, err := p.A.OpenSegment(ctx, p.NameB)
	if err != nil {
		t.Fatalf("open seg-b (%s): %v", p.NameB, err)
	}
	p.BHandle = id
	return p
}

// Run runs the conformance suite with engines sharing the store newMeta
// returns (one store per sub-test).
func Run(t *testing.T, newMeta func(t testing.TB) metadata.Store, nt NewTransport) {
	RunBackend(t, func(t testing.TB) Backend { return SharedBackend(newMeta(t)) }, nt)
}

// RunBackend runs the conformance suite with the engines' metadata from a
// Backend (one newBackend call per sub-test), e.g. one P2P store per engine.
func RunBackend(t *testing.T, newBackend func(t testing.TB) Backend, nt NewTransport) {
	pair := func(t *testing.T) *Pair { return NewPairBackend(t, newBackend(t), nt) }
	t.Run("WriteThenRead", func(t *testing.T) { testWriteRead(t, pair(t)) })
	t.Run("ManyRequestsOneBatch", func(t *testing.T) { testMany(t, pair(t)) })
	t.Run("OutOfRangeRejected", func(t *testing.T) { testOutOfRange(t, pair(t)) })
	t.Run("BatchErrors", func(t *testing.T) { testBatchErrors(t, pair(t)) })
	t.Run("OpenSegmentErrors", func(t *testing.T) { testOpenErrors(t, pair(t)) })
	t.Run("LocalSegment", func(t *testing.T) { testLocal(t, pair(t)) })
	t.Run("SegmentDesc", func(t *testing.T) { testSegmentDesc(t, pair(t)) })
	t.Run("PeerGoneFails", func(t *testing.T) { testPeerGone(t, pair(t)) })
	t.Run("ScatterGather", func(t *testing.T) { testScatterGather(t, pair(t)) })
	t.Run("ScatterGatherRejected", func(t *testing.T) { testScatterGatherRejected(t, pair(t)) })
	t.Run("ReadOnlyBuffer", func(t *testing.T) { testReadOnly(t, pair(t)) })
}

// testReadOnly registers on B a file mapped without write permission as a
// read-only buffer (RegisterReadOnlyMemory): A's WRITEs into it, small
// and large (a tcp target streams payloads of 64 KiB and more), and B's
// own write into it as its segment's target fail without a fault and
// change nothing, while A can read it (where the transport reaches memory
// that is not a memory region: not shm, which maps its peers' regions).
func testReadOnly(t *testing.T, p *Pair) {
	const size = 256 << 10
	want := make([]byte, size)
	fill(want, 11)
	f, err := os.CreateTemp(t.TempDir(), "ro")
	require.NoError(t, err)
	_, err = f.Write(want)
	require.NoError(t, err)
	ro, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Munmap(ro) })
	base := memory.AddrOf(ro)
	require.NoError(t, p.B.RegisterReadOnlyMemory(p.Background, ro, "cpu:0"))
	t.Cleanup(func() { _ = p.B.UnregisterLocalMemory(context.Background(), base) })
	require.NoError(t, p.A.RefreshSegment(p.Background, p.BHandle))

	a := p.RA.Bytes()
	fill(a, 12)
	for _, n := range []uint64{100, 64 << 10, 128 << 10, size} {
		err := p.A.TransferSync(p.Background, []transfer.Request{{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: base, Length: n}})
		require.Error(t, err, "a %d-byte write into a read-only buffer", n)
	}
	err = p.B.TransferSync(p.Background, []transfer.Request{{Op: transfer.Write, Source: p.RB.Addr(), Target: transfer.LocalSegment, TargetOffset: base + 10, Length: 100}})
	require.ErrorIs(t, err, transfer.ErrReadOnly, "B's own write into its read-only buffer")
	require.Equal(t, want, ro, "a refused write changed the read-only buffer")

	clear(a[:size])
	err = p.A.TransferSync(p.Background, []transfer.Request{{Op: transfer.Read, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: base, Length: size}})
	if errors.Is(err, transfer.ErrUnsupported) || errors.Is(err, transfer.ErrRejected) {
		t.Logf("read of a read-only buffer that is not a memory region: %v (this transport maps regions only)", err)
		return
	}
	require.NoError(t, err, "a read of a read-only buffer")
	require.Equal(t, want, a[:size], "read back")
	// The connection that refused the writes still carries requests.
	require.NoError(t, p.A.TransferSync(p.Background, []transfer.Request{{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: p.RB.Addr(), Length: size}}))
	require.Equal(t, a[:size], p.RB.Bytes()[:size])
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func testWriteRead(t *testing.T, p *Pair) {
	a, b := p.RA.Bytes(), p.RB.Bytes()
	fill(a[:65536], 1)
	err := p.A.TransferSync(p.Background, []transfer.Request{{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: p.RB.Addr() + 4096, Length: 65536}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[4096:4096+65536], a[:65536]) {
		t.Fatal("completed WRITE: target bytes differ")
	}
	fill(b[200000:300000], 2)
	err = p.A.TransferSync(p.Background, []transfer.Request{{Op: transfer.Read, Source: p.RA.Addr() + 500000, Target: p.BHandle, TargetOffset: p.RB.Addr() + 200000, Length: 100000}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a[500000:600000], b[200000:300000]) {
		t.Fatal("completed READ: local bytes differ")
	}
}

func testMany(t *testing.T, p *Pair) {
	a, b := p.RA.Bytes(), p.RB.Bytes()
	fill(a, 3)
	const n, sz = 64, 8192
	id, err := p.A.AllocateBatch(n)
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]transfer.Request, n)
	for i := range reqs {
		reqs[i] = transfer.Request{Op: transfer.Write, Source: p.RA.Addr() + uint64(i*sz), Target: p.BHandle, TargetOffset: p.RB.Addr() + uint64((n-1-i)*sz), Length: sz}
	}
	// Submit in two calls: indices continue across calls.
	if err := p.A.Submit(id, reqs[:10]); err != nil {
		t.Fatal(err)
	}
	if err := p.A.Submit(id, reqs[10:]); err != nil {
		t.Fatal(err)
	}
	st, err := p.A.Wait(p.Background, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != n {
		t.Fatalf("got %d statuses, want %d", len(st), n)
	}
	for i, s := range st {
		if s.Status != transfer.StatusCompleted || s.TransferredBytes != sz {
			t.Fatalf("task %d: %v %d %v", i, s.Status, s.TransferredBytes, s.Err)
		}
		got, err := p.A.Status(id, i)
		if err != nil || got.Status != transfer.StatusCompleted {
			t.Fatalf("Status(%d) = %v, %v", i, got, err)
		}
	}
	for i := 0; i < n; i++ {
		if !bytes.Equal(a[i*sz:(i+1)*sz], b[(n-1-i)*sz:(n-i)*sz]) {
			t.Fatalf("block %d misplaced", i)
		}
	}
	if err := p.A.FreeBatch(id); err != nil {
		t.Fatal(err)
	}
	if _, err := p.A.Status(id, 0); !errors.Is(err, transfer.ErrInvalidBatch) {
		t.Fatalf("Status after free = %v, want ErrInvalidBatch", err)
	}
}

func testOutOfRange(t *testing.T, p *Pair) {
	b := p.RB.Bytes()
	fill(b, 4)
	before := append([]byte(nil), b...)
	a := p.RA.Bytes()
	fill(a, 5)
	beforeA := append([]byte(nil), a...)
	base := p.RB.Addr()
	cases := []struct {
		name string
		req  transfer.Request
		want error
	}{
		{"write past end", transfer.Request{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: base + (1 << 20) - 100, Length: 200}, transfer.ErrAddressNotRegistered},
		{"write before start", transfer.Request{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: base - 100, Length: 200}, transfer.ErrAddressNotRegistered},
		{"read past end", transfer.Request{Op: transfer.Read, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: base + (1 << 20), Length: 1}, transfer.ErrAddressNotRegistered},
		{"huge length wraps", transfer.Request{Op: transfer.Read, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: base + 10, Length: ^uint64(0) - 5}, transfer.ErrAddressNotRegistered},
		{"local source unregistered", transfer.Request{Op: transfer.Write, Source: 4096, Target: p.BHandle, TargetOffset: base, Length: 10}, transfer.ErrAddressNotRegistered},
		{"zero length", transfer.Request{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: base, Length: 0}, transfer.ErrInvalidArgument},
		{"bad opcode", transfer.Request{Op: 7, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: base, Length: 1}, transfer.ErrInvalidArgument},
		{"unknown handle", transfer.Request{Op: transfer.Write, Source: p.RA.Addr(), Target: 99, TargetOffset: base, Length: 1}, transfer.ErrSegmentNotFound},
	}
	for _, c := range cases {
		err := p.A.TransferSync(p.Background, []transfer.Request{c.req})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	if !bytes.Equal(b, before) {
		t.Fatal("a rejected request changed the target's memory")
	}
	if !bytes.Equal(a, beforeA) {
		t.Fatal("a rejected request changed the initiator's memory")
	}
}

func testBatchErrors(t *testing.T, p *Pair) {
	if _, err := p.A.AllocateBatch(0); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Errorf("AllocateBatch(0) = %v", err)
	}
	id, err := p.A.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	r := transfer.Request{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: p.RB.Addr(), Length: 16}
	if err := p.A.Submit(id, []transfer.Request{r, r, r}); !errors.Is(err, transfer.ErrTooManyRequests) {
		t.Errorf("3 requests in batch of 2: %v", err)
	}
	if _, err := p.A.Status(id, 0); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Errorf("nothing must be queued after ErrTooManyRequests: %v", err)
	}
	if err := p.A.Submit(12345, []transfer.Request{r}); !errors.Is(err, transfer.ErrInvalidBatch) {
		t.Errorf("unknown batch: %v", err)
	}
	if err := p.A.FreeBatch(id); err != nil {
		t.Fatal(err)
	}
	if err := p.A.FreeBatch(id); !errors.Is(err, transfer.ErrInvalidBatch) {
		t.Errorf("double free: %v", err)
	}
}

func testOpenErrors(t *testing.T, p *Pair) {
	unknown, _ := p.backend(t, UnknownSegment)
	if _, err := p.A.OpenSegment(p.Background, unknown); !errors.Is(err, transfer.ErrSegmentNotFound) {
		t.Errorf("open unknown %q: %v", unknown, err)
	}
	again, err := p.A.OpenSegment(p.Background, p.NameB)
	if err != nil || again != p.BHandle {
		t.Errorf("reopen = %d, %v; want %d", again, err, p.BHandle)
	}
	if id, err := p.A.OpenSegment(p.Background, p.NameA); err != nil || id != transfer.LocalSegment {
		t.Errorf("open own = %d, %v", id, err)
	}
	if err := p.A.CloseSegment(p.BHandle); err != nil {
		t.Fatal(err)
	}
	if err := p.A.CloseSegment(p.BHandle); !errors.Is(err, transfer.ErrSegmentNotFound) {
		t.Errorf("double close: %v", err)
	}
}

func testLocal(t *testing.T, p *Pair) {
	a := p.RA.Bytes()
	fill(a[:1000], 6)
	err := p.A.TransferSync(p.Background, []transfer.Request{{Op: transfer.Write, Source: p.RA.Addr(), Target: transfer.LocalSegment, TargetOffset: p.RA.Addr() + 10000, Length: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a[:1000], a[10000:11000]) {
		t.Fatal("local write did not copy")
	}
}

// testSegmentDesc checks that a's view of b's descriptor lists b's region,
// does not see a region b registers later until RefreshSegment, and is
// gone once the segment is closed.
func testSegmentDesc(t *testing.T, p *Pair) {
	d, err := p.A.SegmentDesc(p.BHandle)
	require.NoError(t, err)
	require.Len(t, d.Buffers, 1)
	assert.Equal(t, p.RB.Addr(), d.Buffers[0].Addr)
	assert.Equal(t, uint64(p.RB.Len()), d.Buffers[0].Length)
	extra, err := memory.Map(4096)
	require.NoError(t, err)
	t.Cleanup(func() { extra.Close() })
	require.NoError(t, p.B.RegisterLocalMemory(p.Background, extra.Bytes(), "cpu:0", true))
	t.Cleanup(func() { _ = p.B.UnregisterLocalMemory(context.Background(), extra.Addr()) })
	d, err = p.A.SegmentDesc(p.BHandle)
	require.NoError(t, err)
	assert.Len(t, d.Buffers, 1, "descriptor changed without a refresh")
	require.NoError(t, p.A.RefreshSegment(p.Background, p.BHandle))
	d, err = p.A.SegmentDesc(p.BHandle)
	require.NoError(t, err)
	var addrs []uint64
	for _, b := range d.Buffers {
		addrs = append(addrs, b.Addr)
	}
	assert.ElementsMatch(t, []uint64{p.RB.Addr(), extra.Addr()}, addrs)
	_, err = p.A.SegmentDesc(transfer.LocalSegment)
	assert.ErrorIs(t, err, transfer.ErrSegmentNotFound)
	require.NoError(t, p.A.CloseSegment(p.BHandle))
	_, err = p.A.SegmentDesc(p.BHandle)
	assert.ErrorIs(t, err, transfer.ErrSegmentNotFound)
}

func testPeerGone(t *testing.T, p *Pair) {
	if err := p.B.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(p.Background, 10*time.Second)
	defer cancel()
	err := p.A.TransferSync(ctx, []transfer.Request{{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: p.RB.Addr(), Length: 64}})
	if err == nil {
		t.Fatal("write to a closed peer reported success")
	}
	if ctx.Err() != nil {
		t.Fatal("write to a closed peer hung until the deadline")
	}
}

// sgPieces are scatter-gather pieces as (offset in a 1 MiB region, length):
// tiny and large ones, pieces adjacent in memory (merged by the engine),
// out of order, and pieces around the tcp slice size (64 KiB).
var sgPieces = [][2]uint64{
	{900000, 3}, {10, 70000}, {70010, 1}, {70011, 65536}, {500000, 7},
	{300000, 32768}, {200000, 100000 - 1}, {600000, 131072}, {800000, 2},
}

// pieces returns sgPieces at base and their total length.
func pieces(base uint64) ([]transfer.Piece, uint64) {
	out := make([]transfer.Piece, len(sgPieces))
	var n uint64
	for i, p := range sgPieces {
		out[i] = transfer.Piece{Addr: base + p[0], Length: p[1]}
		n += p[1]
	}
	return out, n
}

// gathered is the concatenation of sgPieces' bytes of buf.
func gathered(buf []byte) []byte {
	var out []byte
	for _, p := range sgPieces {
		out = append(out, buf[p[0]:p[0]+p[1]]...)
	}
	return out
}

// testScatterGather writes pieces of A's region into one contiguous range
// of B (remote and local segment) and reads the range back into pieces,
// checking that every byte lands where it belongs and nothing else moves.
func testScatterGather(t *testing.T, p *Pair) {
	// A second region of A's, remote-accessible: the local segment's target.
	own, err := memory.MapShared(1<<20, "seg-a-own")
	require.NoError(t, err)
	t.Cleanup(func() { own.Close() })
	require.NoError(t, p.A.RegisterRegion(p.Background, own, "cpu:0", true))
	t.Cleanup(func() { p.A.UnregisterLocalMemory(p.Background, own.Addr()) })
	for _, tc := range []struct {
		name   string
		target transfer.SegmentID
		reg    *memory.Region // the target's memory
	}{
		{"remote", p.BHandle, p.RB},
		{"local segment", transfer.LocalSegment, own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, dst := p.RA.Bytes(), tc.reg.Bytes()
			const at = 4096 // the remote range's offset in dst
			fill(a, 7)
			fill(dst, 8)
			ps, n := pieces(p.RA.Addr())
			want := gathered(a)
			beforeDst := append([]byte(nil), dst...)
			err := p.A.TransferSync(p.Background, []transfer.Request{{Op: transfer.Write, Target: tc.target, TargetOffset: tc.reg.Addr() + at, Length: n, Pieces: ps}})
			require.NoError(t, err)
			require.Equal(t, want, dst[at:at+n], "gathered WRITE: target bytes")
			require.Equal(t, beforeDst[:at], dst[:at], "WRITE touched bytes before its range")
			require.Equal(t, beforeDst[at+n:], dst[at+n:], "WRITE touched bytes after its range")

			// Read it back scattered over other places of A.
			back := make([]transfer.Piece, len(ps))
			for i := range ps {
				back[i] = ps[i]
				back[i].Addr += 1 // shifted: pieces stay inside the region
			}
			fill(dst[at:at+n], 9)
			want = append([]byte(nil), dst[at:at+n]...)
			beforeA := append([]byte(nil), a...)
			err = p.A.TransferSync(p.Background, []transfer.Request{{Op: transfer.Read, Target: tc.target, TargetOffset: tc.reg.Addr() + at, Length: n, Pieces: back}})
			require.NoError(t, err)
			got := make([]byte, 0, n)
			expect := append([]byte(nil), beforeA...)
			off := uint64(0)
			for _, q := range sgPieces {
				o := q[0] + 1
				got = append(got, a[o:o+q[1]]...)
				copy(expect[o:o+q[1]], want[off:off+q[1]])
				off += q[1]
			}
			require.Equal(t, want, got, "scattered READ: local pieces")
			require.Equal(t, expect, a, "READ touched local bytes outside its pieces")
		})
	}
}

// testScatterGatherRejected checks that a malformed or out-of-range
// scatter-gather request fails without changing either side's memory.
func testScatterGatherRejected(t *testing.T, p *Pair) {
	a, b := p.RA.Bytes(), p.RB.Bytes()
	fill(a, 10)
	fill(b, 11)
	beforeA, beforeB := append([]byte(nil), a...), append([]byte(nil), b...)
	ps, n := pieces(p.RA.Addr())
	base := p.RB.Addr()
	outside := append(append([]transfer.Piece(nil), ps...), transfer.Piece{Addr: 4096, Length: 10})
	zero := append(append([]transfer.Piece(nil), ps...), transfer.Piece{Addr: p.RA.Addr(), Length: 0})
	for _, c := range []struct {
		name string
		req  transfer.Request
		want error
	}{
		{"remote range past the end", transfer.Request{Op: transfer.Write, Target: p.BHandle, TargetOffset: base + (1 << 20) - n + 1, Length: n, Pieces: ps}, transfer.ErrAddressNotRegistered},
		{"read past the end", transfer.Request{Op: transfer.Read, Target: p.BHandle, TargetOffset: base + (1 << 20) - n + 1, Length: n, Pieces: ps}, transfer.ErrAddressNotRegistered},
		{"piece outside local memory", transfer.Request{Op: transfer.Write, Target: p.BHandle, TargetOffset: base, Length: n + 10, Pieces: outside}, transfer.ErrAddressNotRegistered},
		{"length mismatch", transfer.Request{Op: transfer.Write, Target: p.BHandle, TargetOffset: base, Length: n - 1, Pieces: ps}, transfer.ErrInvalidArgument},
		{"zero-length piece", transfer.Request{Op: transfer.Write, Target: p.BHandle, TargetOffset: base, Length: n, Pieces: zero}, transfer.ErrInvalidArgument},
	} {
		err := p.A.TransferSync(p.Background, []transfer.Request{c.req})
		assert.ErrorIs(t, err, c.want, c.name)
	}
	require.Equal(t, beforeB, b, "a rejected request changed the target's memory")
	require.Equal(t, beforeA, a, "a rejected request changed the initiator's memory")
}
