package shm_test

import (
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
)

// testTarget is a transfer.Target and shm.FDSource over registered buffers,
// standing in for the engine's Registry so these tests do not depend on
// the engine.
type testTarget struct {
	mu   sync.RWMutex
	bufs []testBuf // sorted by addr, non-overlapping
}

type testBuf struct {
	addr   uint64
	bytes  []byte
	region *memory.Region // the region the bytes belong to
}

var _ shm.FDSource = (*testTarget)(nil)

// add registers b (part or all of region) at its own address.
func (tt *testTarget) add(b []byte, region *memory.Region) {
	tt.addAt(memory.AddrOf(b), b, region)
}

// addAt registers b as if it lived at addr in the target's address space.
func (tt *testTarget) addAt(addr uint64, b []byte, region *memory.Region) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.bufs = append(tt.bufs, testBuf{addr: addr, bytes: b, region: region})
	sort.Slice(tt.bufs, func(i, j int) bool { return tt.bufs[i].addr < tt.bufs[j].addr })
}

// remove unregisters the buffer starting at addr.
func (tt *testTarget) remove(addr uint64) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	for i, b := range tt.bufs {
		if b.addr == addr {
			tt.bufs = append(tt.bufs[:i], tt.bufs[i+1:]...)
			return
		}
	}
}

func (tt *testTarget) find(addr, length uint64) (testBuf, error) {
	if length == 0 {
		return testBuf{}, fmt.Errorf("%w: zero length", transfer.ErrInvalidArgument)
	}
	for _, b := range tt.bufs {
		n := uint64(len(b.bytes))
		if addr >= b.addr && addr-b.addr < n && length <= n-(addr-b.addr) {
			return b, nil
		}
	}
	return testBuf{}, fmt.Errorf("%w: [%#x,+%d)", transfer.ErrAddressNotRegistered, addr, length)
}

// ResolveWrite is Resolve: the test target has no read-only buffers.
func (tt *testTarget) ResolveWrite(addr, length uint64) ([]byte, error) {
	return tt.Resolve(addr, length)
}

func (tt *testTarget) Resolve(addr, length uint64) ([]byte, error) {
	tt.mu.RLock()
	defer tt.mu.RUnlock()
	b, err := tt.find(addr, length)
	if err != nil {
		return nil, err
	}
	off := addr - b.addr
	return b.bytes[off : off+length], nil
}

// FDFor duplicates under the read lock, so a buffer being unregistered and
// closed concurrently can never yield another file's descriptor.
func (tt *testTarget) FDFor(addr, length uint64) (int, uint64, uint64, error) {
	tt.mu.RLock()
	defer tt.mu.RUnlock()
	b, err := tt.find(addr, length)
	if err != nil {
		return -1, 0, 0, err
	}
	fd, err := b.region.DupFD()
	if err != nil {
		return -1, 0, 0, err
	}
	return fd, b.addr, uint64(len(b.bytes)), nil
}

// side is one process's end: a listening transport over a testTarget, and
// what it would publish.
type side struct {
	name string
	tr   *shm.Transport
	tg   *testTarget
	desc metadata.SegmentDesc
	rpc  metadata.RPCMeta
}

func newSide(t testing.TB, name string, cfg shm.Config) *side {
	t.Helper()
	s := &side{name: name, tr: shm.New(cfg), tg: &testTarget{}}
	if err := s.tr.Listen(name, s.tg); err != nil {
		t.Fatalf("listen %s: %v", name, err)
	}
	t.Cleanup(func() { s.tr.Close() })
	s.desc.Name = name
	s.tr.Publish(&s.desc, &s.rpc)
	return s
}

// shared maps and registers a memfd-backed buffer of size bytes.
func (s *side) shared(t testing.TB, size int) *memory.Region {
	t.Helper()
	r, err := memory.MapShared(size, s.name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	s.tg.add(r.Bytes(), r)
	return r
}

// dial returns a peer from s's transport to target's segment.
func (s *side) dial(t testing.TB, target *side) transfer.Peer {
	t.Helper()
	p, err := s.tr.Dial(t.Context(), target.desc, target.rpc)
	if err != nil {
		t.Fatalf("dial %s -> %s: %v", s.name, target.name, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// anon maps an anonymous region (not shareable).
func anon(t testing.TB, size int) *memory.Region {
	t.Helper()
	r, err := memory.Map(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
