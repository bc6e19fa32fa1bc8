package metadatatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
)

// LargeValueBytes is the size of the value the "LargeValue" case writes; a
// backend must accept at least this much per key.
const LargeValueBytes = 4<<20 + 3

// RunStoreTests runs the conformance suite against the Store newStore
// returns. newStore is called once per sub-test and must return an empty
// store; it may register cleanups on t. Failures are reported through t;
// RunStoreTests returns nothing.
func RunStoreTests(t *testing.T, newStore func(t *testing.T) metadata.Store) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, s metadata.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"Delete", testDelete},
		{"NotFound", testNotFound},
		{"EmptyKey", testEmptyKey},
		{"KeyShapes", testKeyShapes},
		{"LargeValue", testLargeValue},
		{"ConcurrentDistinctKeys", testConcurrentDistinctKeys},
		{"ConcurrentSameKey", testConcurrentSameKey},
		{"ValueIsolation", testValueIsolation},
		{"CanceledContext", testCanceledContext},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

func mustPut(t *testing.T, s metadata.Store, key string, value []byte) {
	t.Helper()
	if err := s.Put(t.Context(), key, value); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

func mustGet(t *testing.T, s metadata.Store, key string, want []byte) {
	t.Helper()
	got, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %s, want %s", key, abbrev(got), abbrev(want))
	}
}

func wantNotFound(t *testing.T, op string, err error, key string) {
	t.Helper()
	if !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("%s(%q) error = %v, want one wrapping metadata.ErrNotFound", op, key, err)
	}
}

func abbrev(b []byte) string {
	if len(b) > 64 {
		return fmt.Sprintf("%q…(%d bytes)", b[:64], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func testRoundTrip(t *testing.T, s metadata.Store) {
	key := "mooncake/ram/node-1"
	val := []byte(`{"name":"node-1","protocol":"tcp","buffers":[]}`)
	mustPut(t, s, key, val)
	mustGet(t, s, key, val)
	// Another key is unaffected.
	_, err := s.Get(t.Context(), "mooncake/ram/node-2")
	wantNotFound(t, "Get", err, "mooncake/ram/node-2")
}

func testOverwrite(t *testing.T, s metadata.Store) {
	key := "mooncake/rpc_meta/node-1"
	mustPut(t, s, key, []byte(`{"ip_or_host_name":"10.0.0.1","rpc_port":15000}`))
	second := []byte(`{"ip_or_host_name":"10.0.0.2","rpc_port":16001}`)
	mustPut(t, s, key, second)
	mustGet(t, s, key, second)
	// A shorter value fully replaces a longer one.
	mustPut(t, s, key, []byte(`{}`))
	mustGet(t, s, key, []byte(`{}`))
}

func testDelete(t *testing.T, s metadata.Store) {
	key := "mooncake/ram/gone"
	mustPut(t, s, key, []byte(`{"v":1}`))
	if err := s.Delete(t.Context(), key); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
	_, err := s.Get(t.Context(), key)
	wantNotFound(t, "Get after Delete", err, key)
	wantNotFound(t, "second Delete", s.Delete(t.Context(), key), key)
	// The key can be written again.
	mustPut(t, s, key, []byte(`{"v":2}`))
	mustGet(t, s, key, []byte(`{"v":2}`))
}

func testNotFound(t *testing.T, s metadata.Store) {
	key := "missing/key-1"
	_, err := s.Get(t.Context(), key)
	wantNotFound(t, "Get", err, key)
	if !strings.Contains(err.Error(), key) {
		t.Errorf("Get error %q does not name the key %q", err, key)
	}
	err = s.Delete(t.Context(), key)
	wantNotFound(t, "Delete", err, key)
	if !strings.Contains(err.Error(), key) {
		t.Errorf("Delete error %q does not name the key %q", err, key)
	}
}

func testEmptyKey(t *testing.T, s metadata.Store) {
	if _, err := s.Get(t.Context(), ""); !errors.Is(err, metadata.ErrInvalidKey) {
		t.Errorf(`Get("") error = %v, want metadata.ErrInvalidKey`, err)
	}
	if err := s.Put(t.Context(), "", []byte(`{}`)); !errors.Is(err, metadata.ErrInvalidKey) {
		t.Errorf(`Put("") error = %v, want metadata.ErrInvalidKey`, err)
	}
	if err := s.Delete(t.Context(), ""); !errors.Is(err, metadata.ErrInvalidKey) {
		t.Errorf(`Delete("") error = %v, want metadata.ErrInvalidKey`, err)
	}
}

// shapedKeys are distinct keys that stress URL encoding and byte handling;
// pairs like "a+b"/"a b" and "x%20y"/"x y" must stay distinct.
var shapedKeys = []string{
	"mooncake/ram/node-1",
	"mooncake/cluster-a/rpc_meta/10.0.0.1:15000",
	"with space",
	"plus+sign",
	"plus sign",
	"pct%20lit",
	"pct lit",
	"query?chars&x=1#frag;semi=,comma",
	"unicode/键/ключ/🚀",
	"trailing/",
	"/leading",
	"a//double",
	"tab\tnew\nline",
	"quote\"back\\slash'",
	strings.Repeat("long/", 200),
}

func testKeyShapes(t *testing.T, s metadata.Store) {
	for i, k := range shapedKeys {
		mustPut(t, s, k, fmt.Appendf(nil, `{"i":%d}`, i))
	}
	for i, k := range shapedKeys {
		mustGet(t, s, k, fmt.Appendf(nil, `{"i":%d}`, i))
	}
	for _, k := range shapedKeys {
		if err := s.Delete(t.Context(), k); err != nil {
			t.Fatalf("Delete(%q): %v", k, err)
		}
		_, err := s.Get(t.Context(), k)
		wantNotFound(t, "Get after Delete", err, k)
	}
}

func testLargeValue(t *testing.T, s metadata.Store) {
	rng := rand.New(rand.NewPCG(1, 2))
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	val := make([]byte, LargeValueBytes)
	for i := range val {
		val[i] = letters[rng.IntN(len(letters))]
	}
	val[0], val[len(val)-1] = '"', '"' // one JSON string
	mustPut(t, s, "mooncake/ram/large", val)
	mustGet(t, s, "mooncake/ram/large", val)
}

func testConcurrentDistinctKeys(t *testing.T, s metadata.Store) {
	const workers, perWorker = 8, 32
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				key := fmt.Sprintf("mooncake/ram/w%d-k%d", w, i)
				if err := s.Put(ctx, key, fmt.Appendf(nil, `{"w":%d,"i":%d}`, w, i)); err != nil {
					errs <- fmt.Errorf("Put(%q): %w", key, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	for w := range workers {
		for i := range perWorker {
			mustGet(t, s, fmt.Sprintf("mooncake/ram/w%d-k%d", w, i), fmt.Appendf(nil, `{"w":%d,"i":%d}`, w, i))
		}
	}
}

func testConcurrentSameKey(t *testing.T, s metadata.Store) {
	const workers = 8
	const key = "mooncake/ram/contended"
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	for w := range workers {
		wg.Go(func() {
			if err := s.Put(ctx, key, fmt.Appendf(nil, `{"w":%d}`, w)); err != nil {
				errs <- fmt.Errorf("Put: %w", err)
			}
			// Readers race with writers; any error other than not-found
			// (the first write may not have landed) is a failure.
			if _, err := s.Get(ctx, key); err != nil && !errors.Is(err, metadata.ErrNotFound) {
				errs <- fmt.Errorf("Get: %w", err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	for w := range workers {
		if bytes.Equal(got, fmt.Appendf(nil, `{"w":%d}`, w)) {
			return
		}
	}
	t.Fatalf("Get(%q) = %s, want one of the written values", key, got)
}

func testValueIsolation(t *testing.T, s metadata.Store) {
	const key = "mooncake/ram/isolated"
	orig := []byte(`{"name":"isolated"}`)
	in := bytes.Clone(orig)
	mustPut(t, s, key, in)
	in[2] = 'X' // the caller reuses its buffer after Put
	mustGet(t, s, key, orig)

	out, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	for i := range out {
		out[i] = 'Z' // the caller scribbles over what Get returned
	}
	_ = append(out[:1], "appended"...)
	mustGet(t, s, key, orig)
}

func testCanceledContext(t *testing.T, s metadata.Store) {
	const key = "mooncake/ram/canceled"
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Put(ctx, key, []byte(`{}`)); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with canceled ctx: error = %v, want context.Canceled", err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with canceled ctx: error = %v, want context.Canceled", err)
	}
	if err := s.Delete(ctx, key); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete with canceled ctx: error = %v, want context.Canceled", err)
	}
	// The canceled Put must not have stored anything.
	_, err := s.Get(t.Context(), key)
	wantNotFound(t, "Get after canceled Put", err, key)
}

// benchSizes are the value sizes the benchmarks use: a small rpc_meta record,
// a typical TCP segment descriptor, and one with thousands of buffers.
var benchSizes = []int{64, 4 << 10, 256 << 10}

// RunStoreBenchmarks runs Put, Get and parallel Get benchmarks, one
// sub-benchmark per value size, against the Store newStore returns (called
// once per sub-benchmark). Failures are reported through b.
func RunStoreBenchmarks(b *testing.B, newStore func(b *testing.B) metadata.Store) {
	for _, size := range benchSizes {
		val := bytes.Repeat([]byte{'x'}, size)
		b.Run(fmt.Sprintf("Put/%dB", size), func(b *testing.B) {
			s := newStore(b)
			ctx := b.Context()
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := s.Put(ctx, "mooncake/ram/bench", val); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("Get/%dB", size), func(b *testing.B) {
			s := newStore(b)
			ctx := b.Context()
			if err := s.Put(ctx, "mooncake/ram/bench", val); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := s.Get(ctx, "mooncake/ram/bench"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("GetParallel/%dB", size), func(b *testing.B) {
			s := newStore(b)
			ctx := b.Context()
			if err := s.Put(ctx, "mooncake/ram/bench", val); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Get(ctx, "mooncake/ram/bench"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
