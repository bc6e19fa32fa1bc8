package memory

import (
	"errors"
	"testing"
)

func TestMapWriteReadClose(t *testing.T) {
	r, err := Map(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b := r.Bytes()
	if len(b) != 1<<20 || r.Len() != 1<<20 {
		t.Fatalf("len = %d/%d, want %d", len(b), r.Len(), 1<<20)
	}
	if r.Addr() == 0 || r.Addr() != AddrOf(b) {
		t.Fatalf("addr %#x, AddrOf %#x", r.Addr(), AddrOf(b))
	}
	if AddrOf(b[4096:]) != r.Addr()+4096 {
		t.Fatalf("AddrOf(sub-slice) = %#x, want %#x", AddrOf(b[4096:]), r.Addr()+4096)
	}
	for i := range b {
		if b[i] != 0 {
			t.Fatalf("byte %d = %d, want zeroed memory", i, b[i])
		}
	}
	b[0], b[len(b)-1] = 7, 9
	if got := r.Bytes(); got[0] != 7 || got[len(got)-1] != 9 {
		t.Fatalf("write not visible: %d %d", got[0], got[len(got)-1])
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if r.Bytes() != nil {
		t.Fatal("Bytes after Close must be nil")
	}
	if err := r.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
}

func TestMapInvalidSize(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := Map(n); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("Map(%d) = %v, want ErrInvalidSize", n, err)
		}
	}
	if AddrOf(nil) != 0 {
		t.Error("AddrOf(nil) must be 0")
	}
}
