package memory

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// fdOpen reports whether fd names an open descriptor of this process.
func fdOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

func TestMapSharedTwoMappingsSeeSameBytes(t *testing.T) {
	const size = 1 << 20
	r, err := MapShared(size, "test-shared")
	if err != nil {
		t.Fatal(err)
	}
	fd := r.FD()
	if fd < 0 {
		t.Fatalf("FD() = %d for a shared region", fd)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("memory file flags %#x, %v: want close-on-exec", flags, err)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&sharedSeals != sharedSeals {
		t.Fatalf("seals %#x, %v: want %#x", seals, err, sharedSeals)
	}
	b := r.Bytes()
	if len(b) != size || r.Len() != size || r.Addr() != AddrOf(b) {
		t.Fatalf("len %d/%d addr %#x/%#x", len(b), r.Len(), r.Addr(), AddrOf(b))
	}
	for i := range b {
		if b[i] != 0 {
			t.Fatalf("byte %d = %d, want zeroed memory", i, b[i])
		}
	}

	dup, err := r.DupFD()
	if err != nil {
		t.Fatal(err)
	}
	if dup == fd {
		t.Fatal("DupFD returned the region's own descriptor")
	}
	r2, err := MapFD(dup, size)
	if err != nil {
		t.Fatal(err)
	}
	if r2.FD() != dup {
		t.Fatalf("MapFD region FD() = %d, want the passed %d", r2.FD(), dup)
	}
	if r2.Addr() == r.Addr() {
		t.Fatal("second mapping at the same address")
	}
	b2 := r2.Bytes()
	b[0], b[size-1] = 7, 9
	b2[4096] = 11
	if b2[0] != 7 || b2[size-1] != 9 || b[4096] != 11 {
		t.Fatalf("mappings do not share bytes: %d %d %d", b2[0], b2[size-1], b[4096])
	}
	// The seals hold for every descriptor of the file: nobody can resize it.
	if err := unix.Ftruncate(dup, 4096); !errors.Is(err, unix.EPERM) {
		t.Fatalf("shrinking a sealed memory file: %v, want EPERM", err)
	}
	if err := unix.Ftruncate(dup, 2*size); !errors.Is(err, unix.EPERM) {
		t.Fatalf("growing a sealed memory file: %v, want EPERM", err)
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if fdOpen(fd) {
		t.Fatal("Close left the memory file open")
	}
	if r.FD() != -1 || r.Bytes() != nil {
		t.Fatalf("after Close: FD %d, Bytes nil %v", r.FD(), r.Bytes() == nil)
	}
	if _, err := r.DupFD(); !errors.Is(err, ErrClosed) {
		t.Fatalf("DupFD after Close = %v, want ErrClosed", err)
	}
	if err := r.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
	// The other mapping keeps the file alive.
	if b2[0] != 7 {
		t.Fatal("second mapping lost its bytes when the first closed")
	}
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	if fdOpen(dup) {
		t.Fatal("MapFD region's Close left the descriptor open")
	}
}

func TestAnonymousRegionHasNoFD(t *testing.T) {
	r, err := Map(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.FD() != -1 {
		t.Fatalf("FD() = %d for an anonymous region, want -1", r.FD())
	}
	if _, err := r.DupFD(); !errors.Is(err, ErrNotShared) {
		t.Fatalf("DupFD = %v, want ErrNotShared", err)
	}
}

func TestMapSharedInvalidSize(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := MapShared(n, "x"); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("MapShared(%d) = %v, want ErrInvalidSize", n, err)
		}
	}
}

// TestMapFDTakesOwnershipOnError: a failed MapFD closes the descriptor it
// was given, so callers never leak it.
func TestMapFDTakesOwnershipOnError(t *testing.T) {
	r, err := MapShared(8192, "owner")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cases := []struct {
		name string
		size int
	}{
		{"zero size", 0},
		{"negative size", -5},
		{"larger than the file", 8192 + 4096},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fd, err := r.DupFD()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := MapFD(fd, c.size); !errors.Is(err, ErrInvalidSize) {
				t.Fatalf("MapFD(%d) = %v, want ErrInvalidSize", c.size, err)
			}
			if fdOpen(fd) {
				unix.Close(fd)
				t.Fatal("failed MapFD left the descriptor open")
			}
		})
	}
	// A bad descriptor fails cleanly too.
	if _, err := MapFD(-1, 4096); err == nil {
		t.Fatal("MapFD(-1) succeeded")
	}
	// Mapping a prefix of the file is allowed.
	fd, err := r.DupFD()
	if err != nil {
		t.Fatal(err)
	}
	p, err := MapFD(fd, 4096)
	if err != nil {
		t.Fatal(err)
	}
	r.Bytes()[100] = 42
	if p.Len() != 4096 || p.Bytes()[100] != 42 {
		t.Fatalf("prefix mapping: len %d byte %d", p.Len(), p.Bytes()[100])
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPrefaultSharedKeepsBytes(t *testing.T) {
	a, err := MapShared(3*PrefaultChunk/2, "prefault-test")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Bytes()[0], a.Bytes()[a.Len()-1] = 7, 9
	fd, err := a.DupFD()
	if err != nil {
		t.Fatal(err)
	}
	b, err := MapFD(fd, a.Len())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Prefault(); err != nil {
		if errors.Is(err, ErrPrefaultUnsupported) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	if got := b.Bytes(); got[0] != 7 || got[len(got)-1] != 9 || got[len(got)/2] != 0 {
		t.Fatalf("prefault changed the bytes: first %d, last %d, middle %d", got[0], got[len(got)-1], got[len(got)/2])
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Prefault(); err != nil {
		t.Fatalf("prefault after close: %v, want nil (nothing to do)", err)
	}
}
