package disk

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func open(t *testing.T, capacity uint64) *Store {
	t.Helper()
	s, err := Open(Config{Dir: t.TempDir(), Capacity: capacity})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func value(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	s := open(t, 1<<20)
	for i, n := range []int{1, 7, 4096, 100003} {
		key := "rt/" + strings.Repeat("k", i+1)
		v := value(uint64(i), n)
		if ev, err := s.Put(key, uint64(i+1), v); err != nil || len(ev) != 0 {
			t.Fatalf("put %q: evicted %v, %v", key, ev, err)
		}
		got := make([]byte, n)
		if err := s.Get(key, uint64(i+1), got); err != nil {
			t.Fatalf("get %q: %v", key, err)
		}
		if !bytes.Equal(got, v) {
			t.Fatalf("get %q: bytes differ", key)
		}
		fi, err := os.Stat(s.Path(key))
		if err != nil || uint64(fi.Size()) != FileSize(key, uint64(n)) {
			t.Fatalf("file of %q: %v, %v; want %d bytes", key, fi, err, FileSize(key, uint64(n)))
		}
	}
	st := s.Stats()
	if st.Files != 4 || st.Writes != 4 || st.Reads != 4 || st.Corrupt != 0 {
		t.Fatalf("stats %+v", st)
	}
	var used uint64
	for i, n := range []int{1, 7, 4096, 100003} {
		used += FileSize("rt/"+strings.Repeat("k", i+1), uint64(n))
	}
	if st.Used != used {
		t.Fatalf("used %d, want %d", st.Used, used)
	}
	// Replacing a key's file keeps one file and the new content.
	v := value(99, 50)
	if _, err := s.Put("rt/k", 9, v); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 50)
	if err := s.Get("rt/k", 9, got); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get replaced: %v", err)
	}
	if st := s.Stats(); st.Files != 4 {
		t.Fatalf("files after replace: %d, want 4", st.Files)
	}
}

// TestCorruptIsMiss flips, truncates, extends and swaps files: every read
// fails with ErrCorrupt (never wrong bytes), the file is gone, and the next
// read is ErrNotFound.
func TestCorruptIsMiss(t *testing.T) {
	const n = 1000
	key := "obj"
	cases := []struct {
		name   string
		damage func(t *testing.T, path string)
		id     uint64 // id asked for; 0 = the stored one (5)
		size   int    // buffer length; 0 = n
	}{
		{"value byte flipped", func(t *testing.T, p string) { flip(t, p, headerSize+len(key)+n/2) }, 0, 0},
		{"last byte flipped", func(t *testing.T, p string) { flip(t, p, headerSize+len(key)+n-1) }, 0, 0},
		{"header byte flipped", func(t *testing.T, p string) { flip(t, p, 20) }, 0, 0},
		{"key byte flipped", func(t *testing.T, p string) { flip(t, p, headerSize) }, 0, 0},
		{"magic flipped", func(t *testing.T, p string) { flip(t, p, 0) }, 0, 0},
		{"truncated", func(t *testing.T, p string) { trunc(t, p, -1) }, 0, 0},
		{"truncated to header", func(t *testing.T, p string) { trunc(t, p, headerSize) }, 0, 0},
		{"empty", func(t *testing.T, p string) { trunc(t, p, 0) }, 0, 0},
		{"extended", func(t *testing.T, p string) { appendByte(t, p) }, 0, 0},
		{"removed behind our back", func(t *testing.T, p string) { os.Remove(p) }, 0, 0},
		{"other object id", func(t *testing.T, p string) {}, 6, 0},
		{"other length", func(t *testing.T, p string) {}, 0, n - 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, 1<<20)
			v := value(1, n)
			if _, err := s.Put(key, 5, v); err != nil {
				t.Fatal(err)
			}
			c.damage(t, s.Path(key))
			id, size := uint64(5), n
			if c.id != 0 {
				id = c.id
			}
			if c.size != 0 {
				size = c.size
			}
			got := make([]byte, size)
			err := s.Get(key, id, got)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("get after damage: %v, want ErrCorrupt", err)
			}
			if _, serr := os.Stat(s.Path(key)); !errors.Is(serr, os.ErrNotExist) {
				t.Fatalf("corrupt file still there: %v", serr)
			}
			if err := s.Get(key, id, got); !errors.Is(err, ErrNotFound) {
				t.Fatalf("second get: %v, want ErrNotFound", err)
			}
			if st := s.Stats(); st.Corrupt != 1 || st.Files != 0 || st.Used != 0 {
				t.Fatalf("stats %+v: want 1 corrupt, 0 files, 0 used", st)
			}
		})
	}
}

// TestCorruptReadersRace has several readers find the same file corrupt
// while the key is written again (same object id, new bytes): exactly one
// of them deletes the corrupt file, and never the newer file written once
// the corrupt one was forgotten (a reader that deleted by key could remove
// it); a reader that got the newer file gets its bytes.
func TestCorruptReadersRace(t *testing.T) {
	const n, readers = 512, 8
	s := open(t, 1<<20)
	key := "race"
	for id := uint64(1); id <= 50; id++ {
		if _, err := s.Put(key, id, value(id, n)); err != nil {
			t.Fatalf("round %d: put: %v", id, err)
		}
		flip(t, s.Path(key), headerSize+len(key)+1)
		v := value(id+1000, n)
		var wg sync.WaitGroup
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got := make([]byte, n)
				switch err := s.Get(key, id, got); {
				case err == nil:
					if !bytes.Equal(got, v) {
						t.Errorf("round %d: get returned bytes other than the newer value", id)
					}
				case !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotFound):
					t.Errorf("round %d: get: %v, want ErrCorrupt or ErrNotFound", id, err)
				}
			}()
		}
		// Written while the readers may still run (refused while the
		// corrupt file is being read).
		for {
			if _, err := s.Put(key, id, v); err == nil {
				break
			} else if !errors.Is(err, ErrFull) {
				t.Fatalf("round %d: put again: %v", id, err)
			}
		}
		wg.Wait()
		got := make([]byte, n)
		if err := s.Get(key, id, got); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("round %d: the value written after the corrupt one: %v", id, err)
		}
	}
}

func flip(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func trunc(t *testing.T, path string, n int64) {
	t.Helper()
	if n < 0 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		n = fi.Size() + n
	}
	if err := os.Truncate(path, n); err != nil {
		t.Fatal(err)
	}
}

func appendByte(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()
}

// TestLRUEviction fills the store past its size limit: the least recently
// used files go (a read counts as a use), Put reports them, and the bytes
// used never exceed the limit.
func TestLRUEviction(t *testing.T) {
	const n = 1000
	size := FileSize("k0", n)
	s := open(t, 3*size) // room for three files
	for i := range 3 {
		if ev, err := s.Put(key(i), uint64(i), value(uint64(i), n)); err != nil || len(ev) != 0 {
			t.Fatalf("put %d: %v %v", i, ev, err)
		}
	}
	// Touch k0: k1 is now the least recently used.
	if err := s.Get(key(0), 0, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	ev, err := s.Put(key(3), 3, value(3, n))
	if err != nil || len(ev) != 1 || ev[0] != (Evicted{Key: key(1), ID: 1}) {
		t.Fatalf("put k3: evicted %v, %v; want [k1/1]", ev, err)
	}
	if _, err := os.Stat(s.Path(key(1))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("evicted file still there: %v", err)
	}
	if err := s.Get(key(1), 1, make([]byte, n)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get evicted: %v, want ErrNotFound", err)
	}
	// A file twice as large evicts the two least recently used (k2, k0).
	ev, err = s.Put(key(4), 4, value(4, 2*n+headerSize+2))
	if err != nil || len(ev) != 2 || ev[0].Key != key(2) || ev[1].Key != key(0) {
		t.Fatalf("put big: evicted %v, %v; want [k2 k0]", ev, err)
	}
	st := s.Stats()
	if st.Used > st.Capacity || st.Files != 2 || st.Evictions != 3 {
		t.Fatalf("stats %+v: want 2 files, 3 evictions, used <= capacity", st)
	}
	for _, i := range []int{3, 4} {
		if _, err := os.Stat(s.Path(key(i))); err != nil {
			t.Fatalf("k%d missing: %v", i, err)
		}
	}
	// Larger than the whole store: refused, nothing evicted.
	if ev, err := s.Put("huge", 9, make([]byte, 3*size)); !errors.Is(err, ErrTooLarge) || len(ev) != 0 {
		t.Fatalf("put huge: %v %v, want ErrTooLarge", ev, err)
	}
}

func key(i int) string { return "k" + string(rune('0'+i)) }

func TestBadInput(t *testing.T) {
	if _, err := Open(Config{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("open without dir: %v", err)
	}
	s := open(t, 1<<20)
	if _, err := s.Put("", 1, []byte{1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := s.Put("k", 1, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty value: %v", err)
	}
	if _, err := s.Put(strings.Repeat("x", MaxKeyLen+1), 1, []byte{1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("long key: %v", err)
	}
	if err := s.Get("k", 1, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty buffer: %v", err)
	}
	if err := s.Get("absent", 1, make([]byte, 4)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent: %v", err)
	}
	if ok, err := s.Delete("absent", 0); ok || err != nil {
		t.Fatalf("delete absent: %v %v", ok, err)
	}
	if _, err := s.Put("k", 3, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Delete("k", 2); ok || err != nil {
		t.Fatalf("delete of another object id: %v %v; want kept", ok, err)
	}
	if ok, err := s.Delete("k", 3); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if _, err := os.Stat(s.Path("k")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deleted file still there: %v", err)
	}
}

// TestLockAndStale: a second store on the same directory is refused; a
// new store deletes the files an earlier one left; Close deletes its own.
func TestLockAndStale(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir, Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: dir, Capacity: 1 << 20}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	if _, err := s.Put("a", 1, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	// A stale file from an "earlier process", and an unrelated file.
	stale := filepath.Join(dir, strings.Repeat("0", 64)+fileExt)
	os.WriteFile(stale, []byte("old"), 0o644)
	mine := filepath.Join(dir, "notes.txt")
	os.WriteFile(mine, []byte("keep"), 0o644)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path("a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file survived Close: %v", err)
	}
	if err := s.Get("a", 1, make([]byte, 5)); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
	os.WriteFile(stale, []byte("old"), 0o644)
	s2, err := Open(Config{Dir: dir, Capacity: 1 << 20})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s2.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale file survived Open: %v", err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Fatalf("unrelated file removed: %v", err)
	}
}

// TestDefaultCapacity: capacity 0 takes 90% of the filesystem's free space.
func TestDefaultCapacity(t *testing.T) {
	s := open(t, 0)
	if s.Capacity() == 0 {
		t.Fatal("capacity 0")
	}
}
