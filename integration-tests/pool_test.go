package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// TestPutGetRoundtrip stores values of several sizes through the copying
// Put/Get path and checks them byte for byte, then existence and removal.
func TestPutGetRoundtrip(t *testing.T) {
	_, c := startPool(t, master.Config{})
	ctx := testContext(t)
	r := newRand(t, 1)

	sizes := []struct {
		name string
		n    int
	}{
		{"1B", 1},
		{"7B", 7},
		{"4KiB", 4 << 10},
		{"12345B", 12345}, // not a multiple of 8
		{"1MiB", 1 << 20},
		{"1MiB+3", 1<<20 + 3},
	}
	values := map[string][]byte{}
	var keys []string
	for _, s := range sizes {
		key := "rt/" + s.name
		v := randBytes(r, s.n)
		values[key] = v
		keys = append(keys, key)
		t.Run(s.name, func(t *testing.T) {
			if err := c.Put(ctx, key, v, nil); err != nil {
				t.Fatalf("put %q (%d bytes): %v", key, s.n, err)
			}
			mustGet(t, ctx, c, key, v)
			ok, err := c.IsExist(ctx, key)
			if err != nil || !ok {
				t.Fatalf("IsExist(%q) = %v, %v; want true", key, ok, err)
			}
		})
	}

	st := stats(t, ctx, c)
	var total uint64
	for _, v := range values {
		total += uint64(len(v))
	}
	if st.Objects != int64(len(values)) || st.Used != total || st.Capacity != poolSize {
		t.Fatalf("stats %v: want %d objects, %d bytes used of %d", st, len(values), total, poolSize)
	}

	t.Run("BatchIsExist", func(t *testing.T) {
		q := append([]string{"rt/missing"}, keys...)
		q = append(q, "rt/also-missing")
		got, err := c.BatchIsExist(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range q {
			if want := !strings.Contains(k, "missing"); got[i] != want {
				t.Errorf("BatchIsExist[%d] %q = %v, want %v", i, k, got[i], want)
			}
		}
		ok, err := c.IsExist(ctx, "rt/missing")
		if err != nil || ok {
			t.Fatalf("IsExist(missing) = %v, %v; want false, nil", ok, err)
		}
	})

	t.Run("Remove", func(t *testing.T) {
		for _, k := range keys {
			// Get and IsExist granted a lease (10 s default), so a plain
			// remove is refused and a forced one goes through.
			wantErr(t, "remove leased "+k, c.Remove(ctx, k, false), store.ErrObjectHasLease)
			if err := c.Remove(ctx, k, true); err != nil {
				t.Fatalf("remove %q: %v", k, err)
			}
			_, err := c.Get(ctx, k)
			wantErr(t, "get removed "+k, err, store.ErrObjectNotFound)
			ok, err := c.IsExist(ctx, k)
			if err != nil || ok {
				t.Fatalf("IsExist(removed %q) = %v, %v; want false, nil", k, ok, err)
			}
			wantErr(t, "remove again "+k, c.Remove(ctx, k, false), store.ErrObjectNotFound)
		}
		// A key nobody read holds no lease: a plain remove suffices.
		if err := c.Put(ctx, "rt/unread", []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Remove(ctx, "rt/unread", false); err != nil {
			t.Fatalf("remove unleased key: %v", err)
		}
		if st := stats(t, ctx, c); st.Objects != 0 || st.Used != 0 {
			t.Fatalf("stats after removing everything: %v", st)
		}
	})
}

// TestZeroCopy moves values between registered (off-heap) buffers and the
// pool with BatchPutFrom / BatchGetInto.
func TestZeroCopy(t *testing.T) {
	_, c := startPool(t, master.Config{})
	ctx := testContext(t)
	r := newRand(t, 2)

	const n = 32
	src := registeredRegion(t, c, 1<<20)
	dst := registeredRegion(t, c, 1<<20)
	fillRandom(r, src)

	keys := make([]string, n)
	srcs := make([][]byte, n)
	off := 0
	for i := range n {
		size := 2 + r.IntN(16<<10)
		keys[i] = fmt.Sprintf("zc/%02d", i)
		srcs[i] = src[off : off+size]
		off += (size + 63) &^ 63
	}
	for i, err := range c.BatchPutFrom(ctx, keys, srcs, nil) {
		if err != nil {
			t.Fatalf("BatchPutFrom %q: %v", keys[i], err)
		}
	}

	t.Run("BatchGetInto", func(t *testing.T) {
		// Every key once, and key 5 a second time: both destinations are
		// filled. Each destination is 64 bytes longer than the value and
		// pre-filled with a marker that must survive past the value.
		q := append(append([]string(nil), keys...), keys[5])
		want := append(append([][]byte(nil), srcs...), srcs[5])
		dsts := make([][]byte, len(q))
		off := 0
		for i, w := range want {
			dsts[i] = dst[off : off+len(w)+64]
			off += (len(w) + 64 + 63) &^ 63
			for j := range dsts[i] {
				dsts[i][j] = 0xAA
			}
		}
		got, errs := c.BatchGetInto(ctx, q, dsts)
		for i := range q {
			if errs[i] != nil {
				t.Fatalf("BatchGetInto[%d] %q: %v", i, q[i], errs[i])
			}
			if got[i] != len(want[i]) {
				t.Fatalf("BatchGetInto[%d] %q read %d bytes, want %d", i, q[i], got[i], len(want[i]))
			}
			if !bytes.Equal(dsts[i][:got[i]], want[i]) {
				t.Fatalf("BatchGetInto[%d] %q: content differs at %d", i, q[i], firstDiff(dsts[i][:got[i]], want[i]))
			}
			if tail := dsts[i][got[i]:]; !bytes.Equal(tail, bytes.Repeat([]byte{0xAA}, len(tail))) {
				t.Fatalf("BatchGetInto[%d] %q wrote past the value", i, q[i])
			}
		}
		// The copying Get sees the same bytes.
		mustGet(t, ctx, c, keys[7], srcs[7])
	})

	t.Run("BufferOverflow", func(t *testing.T) {
		got, err := c.GetInto(ctx, keys[0], dst[:len(srcs[0])-1])
		wantErr(t, "GetInto a too small buffer", err, store.ErrBufferOverflow)
		if got != 0 {
			t.Fatalf("GetInto a too small buffer read %d bytes", got)
		}
	})

	t.Run("UnregisteredSource", func(t *testing.T) {
		before := stats(t, ctx, c)
		heap := randBytes(r, 4096) // Go heap: never registered
		wantErr(t, "PutFrom a heap slice", c.PutFrom(ctx, "zc/heap", heap, nil), store.ErrTransferFail)
		ok, err := c.IsExist(ctx, "zc/heap")
		if err != nil || ok {
			t.Fatalf("IsExist after a failed put = %v, %v; want false", ok, err)
		}
		if after := stats(t, ctx, c); after.Objects != before.Objects || after.Used != before.Used {
			t.Fatalf("failed put leaked space: before %v, after %v", before, after)
		}
		// The key is free again: a put from registered memory succeeds.
		if err := c.PutFrom(ctx, "zc/heap", src[:4096], nil); err != nil {
			t.Fatalf("PutFrom after a failed put: %v", err)
		}
	})

	t.Run("UnregisteredDestination", func(t *testing.T) {
		heap := make([]byte, len(srcs[1]))
		_, err := c.GetInto(ctx, keys[1], heap)
		wantErr(t, "GetInto a heap slice", err, store.ErrTransferFail)
	})
}

// TestOverwriteIsNoOp: putting an existing key succeeds and keeps the old
// value (upstream: OBJECT_ALREADY_EXISTS is a no-op success).
func TestOverwriteIsNoOp(t *testing.T) {
	_, c := startPool(t, master.Config{})
	ctx := testContext(t)
	r := newRand(t, 3)

	v1, v2 := randBytes(r, 4096), randBytes(r, 8192)
	if err := c.Put(ctx, "ow/k", v1, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "ow/k", v2, nil); err != nil {
		t.Fatalf("second put of an existing key: %v, want nil", err)
	}
	mustGet(t, ctx, c, "ow/k", v1)
	if st := stats(t, ctx, c); st.Objects != 1 || st.Used != uint64(len(v1)) {
		t.Fatalf("stats after an overwrite: %v", st)
	}

	t.Run("SameKeyTwiceInOneBatch", func(t *testing.T) {
		buf := registeredRegion(t, c, 8192)
		fillRandom(r, buf)
		a, b := buf[:4096], buf[4096:]
		for i, err := range c.BatchPutFrom(ctx, []string{"ow/dup", "ow/dup"}, [][]byte{a, b}, nil) {
			if err != nil {
				t.Fatalf("BatchPutFrom[%d]: %v", i, err)
			}
		}
		mustGet(t, ctx, c, "ow/dup", a)
	})
}

// TestReplicas: a value put with two replicas survives the loss of either
// storage node.
func TestReplicas(t *testing.T) {
	t.Run("GracefulNodeLoss", func(t *testing.T) {
		cl, c := startPool(t, master.Config{})
		ctx := testContext(t)
		v := randBytes(newRand(t, 4), 256<<10)
		if err := c.Put(ctx, "rep/k", v, &client.PutOptions{ReplicaNum: 2}); err != nil {
			t.Fatal(err)
		}
		st := stats(t, ctx, c)
		if st.Objects != 1 || st.Used != 2*uint64(len(v)) || len(st.SegmentStats) != 2 {
			t.Fatalf("stats after a 2-replica put: %v", st)
		}
		for _, s := range st.SegmentStats {
			if s.Objects != 1 || s.Used != uint64(len(v)) {
				t.Fatalf("segment %s holds %d objects, %d bytes; want one replica", s.Name, s.Objects, s.Used)
			}
		}
		mustGet(t, ctx, c, "rep/k", v)

		// Closing node 0 unmounts its segment: one replica is left.
		if err := cl.Nodes[0].Close(); err != nil {
			t.Fatalf("close node 0: %v", err)
		}
		if st := stats(t, ctx, c); st.Segments != 1 || st.Objects != 1 || st.Used != uint64(len(v)) || st.Capacity != segmentSize {
			t.Fatalf("stats after closing node 0: %v", st)
		}
		mustGet(t, ctx, c, "rep/k", v)

		// Closing node 1 drops the last replica.
		if err := cl.Nodes[1].Close(); err != nil {
			t.Fatalf("close node 1: %v", err)
		}
		_, err := c.Get(ctx, "rep/k")
		wantErr(t, "get after losing every replica", err, store.ErrObjectNotFound)
		if st := stats(t, ctx, c); st.Segments != 0 || st.Objects != 0 || st.Used != 0 || st.Capacity != 0 {
			t.Fatalf("stats with no nodes: %v", st)
		}
		wantErr(t, "put with no nodes", c.Put(ctx, "rep/none", v[:10], nil), store.ErrNoAvailableHandle)
	})

	t.Run("DeadTransportFallsBack", func(t *testing.T) {
		// Node 0's data plane dies but its segment stays mounted: reads
		// whose first replica is there fall back to the one on node 1.
		cl, c := startPool(t, master.Config{})
		ctx := testContext(t)
		r := newRand(t, 5)
		const n = 8
		vals := make([][]byte, n)
		for i := range vals {
			vals[i] = randBytes(r, 64<<10)
			if err := c.Put(ctx, fmt.Sprintf("rep/%d", i), vals[i], &client.PutOptions{ReplicaNum: 2}); err != nil {
				t.Fatal(err)
			}
		}
		only0 := randBytes(r, 1000)
		if err := c.Put(ctx, "rep/only-0", only0, &client.PutOptions{ReplicaNum: 1, PreferredSegment: "node-0"}); err != nil {
			t.Fatal(err)
		}
		mustGet(t, ctx, c, "rep/only-0", only0)
		if err := cl.Nodes[0].Engine().Close(); err != nil {
			t.Fatalf("close node 0's engine: %v", err)
		}
		for i, v := range vals {
			mustGet(t, ctx, c, fmt.Sprintf("rep/%d", i), v)
		}
		// A value whose only replica is unreachable fails the transfer
		// instead of returning wrong bytes.
		_, err := c.Get(ctx, "rep/only-0")
		wantErr(t, "get from a dead node", err, store.ErrTransferFail)
		// A 2-replica put cannot land on node 0: it fails and is revoked.
		before := stats(t, ctx, c)
		wantErr(t, "2-replica put with a dead node", c.Put(ctx, "rep/new", vals[0], &client.PutOptions{ReplicaNum: 2}), store.ErrTransferFail)
		ok, err := c.IsExist(ctx, "rep/new")
		if err != nil || ok {
			t.Fatalf("IsExist after a failed put = %v, %v; want false", ok, err)
		}
		if after := stats(t, ctx, c); after.Objects != before.Objects || after.Used != before.Used {
			t.Fatalf("failed put leaked space: before %v, after %v", before, after)
		}
	})
}

// TestEvictionUnderPressure writes three times what the pool holds: every
// put succeeds because the master evicts the least recently used values,
// and the newest values are the ones left.
func TestEvictionUnderPressure(t *testing.T) {
	// Puts take no lease, so nothing written here is protected from
	// eviction whatever the TTL; the TTL only has to outlast the final
	// reads (a read that finishes after its lease fails with LEASE_EXPIRED,
	// so a 1 ms lease would fail them on a busy machine).
	_, c := startPool(t, master.Config{DefaultLeaseTTL: 2 * time.Second, EvictionHighWatermark: 1.0})
	ctx := testContext(t)

	const (
		seed    = 6
		valSize = 64 << 10
		slots   = poolSize / valSize // values the pool holds at once
		total   = 3 * slots
	)
	t.Logf("value seed %d", seed)
	key := func(i int) string { return fmt.Sprintf("ev/%04d", i) }
	for i := range total {
		if err := c.Put(ctx, key(i), valueFor(seed, i, valSize), nil); err != nil {
			t.Fatalf("put %d of %d: %v", i, total, err)
		}
	}

	st := stats(t, ctx, c)
	t.Logf("after %d puts: %v", total, st)
	switch {
	case st.EvictedObjects == 0:
		t.Fatalf("nothing evicted: %v", st)
	case st.Used > st.Capacity || st.Capacity != poolSize:
		t.Fatalf("used %d of capacity %d (want %d)", st.Used, st.Capacity, poolSize)
	case st.Objects > slots || st.Used != uint64(st.Objects)*valSize:
		t.Fatalf("%d objects using %d bytes; at most %d of %d bytes fit", st.Objects, st.Used, slots, valSize)
	case uint64(st.Objects)+st.EvictedObjects != total:
		t.Fatalf("%d objects left + %d evicted != %d written", st.Objects, st.EvictedObjects, total)
	}

	// The newest half-pool of keys is intact, the oldest pool's worth gone.
	for i := total - slots/2; i < total; i++ {
		mustGet(t, ctx, c, key(i), valueFor(seed, i, valSize))
	}
	for i := range slots {
		_, err := c.Get(ctx, key(i))
		wantErr(t, "get evicted "+key(i), err, store.ErrObjectNotFound)
	}
}

// TestLeaseProtectsFromEviction: a leased value survives a pool filled past
// capacity; once everything is leased, puts fail with NO_AVAILABLE_HANDLE.
func TestLeaseProtectsFromEviction(t *testing.T) {
	_, c := startPool(t, master.Config{DefaultLeaseTTL: time.Hour, EvictionHighWatermark: 1.0})
	ctx := testContext(t)
	r := newRand(t, 7)

	const valSize = 64 << 10
	const slots = poolSize / valSize
	protected := randBytes(r, valSize)
	if err := c.Put(ctx, "lease/protected", protected, nil); err != nil {
		t.Fatal(err)
	}
	mustGet(t, ctx, c, "lease/protected", protected) // grants the lease

	// Fill the pool; IsExist leases every value, so nothing can be evicted.
	stored, full := 0, false
	for i := 0; i < 2*slots && !full; i++ {
		k := fmt.Sprintf("lease/fill-%03d", i)
		err := c.Put(ctx, k, valueFor(7, i, valSize), nil)
		switch {
		case store.CodeOf(err) == store.NoAvailableHandle:
			full = true
		case err != nil:
			t.Fatalf("put %q: %v", k, err)
		default:
			ok, err := c.IsExist(ctx, k)
			if err != nil || !ok {
				t.Fatalf("IsExist(%q) = %v, %v after put", k, ok, err)
			}
			stored++
		}
	}
	if !full {
		t.Fatalf("%d puts of %d bytes into a %d-byte pool never failed", stored, valSize, poolSize)
	}
	if stored != slots-1 {
		t.Errorf("%d values fit beside the protected one, want %d", stored, slots-1)
	}
	mustGet(t, ctx, c, "lease/protected", protected)
	if st := stats(t, ctx, c); st.EvictedObjects != 0 || st.Objects != int64(stored+1) {
		t.Fatalf("stats with everything leased: %v (want 0 evicted, %d objects)", st, stored+1)
	}

	wantErr(t, "remove a leased key", c.Remove(ctx, "lease/protected", false), store.ErrObjectHasLease)
	if err := c.Remove(ctx, "lease/protected", true); err != nil {
		t.Fatalf("forced remove: %v", err)
	}
	_, err := c.Get(ctx, "lease/protected")
	wantErr(t, "get a removed key", err, store.ErrObjectNotFound)
	// The freed slot takes one more value.
	if err := c.Put(ctx, "lease/after", protected, nil); err != nil {
		t.Fatalf("put into the freed slot: %v", err)
	}
}

// TestBadInputs: invalid calls fail with the documented codes and change
// nothing.
func TestBadInputs(t *testing.T) {
	_, c := startPool(t, master.Config{})
	ctx := testContext(t)

	huge := registeredRegion(t, c, poolSize+1)
	longKey := strings.Repeat("k", master.MaxKeyLen+1)
	getErr := func(key string) error { _, err := c.Get(ctx, key); return err }
	existErr := func(key string) error { _, err := c.IsExist(ctx, key); return err }
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"PutEmptyKey", func() error { return c.Put(ctx, "", []byte("v"), nil) }, store.ErrInvalidParams},
		{"PutEmptyValue", func() error { return c.Put(ctx, "bad/k", nil, nil) }, store.ErrInvalidParams},
		{"PutFromEmptyValue", func() error { return c.PutFrom(ctx, "bad/k", huge[:0], nil) }, store.ErrInvalidParams},
		{"PutKeyTooLong", func() error { return c.Put(ctx, longKey, []byte("v"), nil) }, store.ErrInvalidKey},
		{"PutLargerThanLocalBuffer", func() error { return c.Put(ctx, "bad/k", make([]byte, localBuffer+1), nil) }, store.ErrBufferOverflow},
		{"PutFromLargerThanPool", func() error { return c.PutFrom(ctx, "bad/k", huge, nil) }, store.ErrNoAvailableHandle},
		{"BatchPutFromLengthMismatch", func() error {
			return c.BatchPutFrom(ctx, []string{"bad/a", "bad/b"}, [][]byte{huge[:8]}, nil)[0]
		}, store.ErrInvalidParams},
		{"GetEmptyKey", func() error { return getErr("") }, store.ErrInvalidParams},
		{"GetKeyTooLong", func() error { return getErr(longKey) }, store.ErrInvalidKey},
		{"GetMissing", func() error { return getErr("bad/missing") }, store.ErrObjectNotFound},
		{"IsExistEmptyKey", func() error { return existErr("") }, store.ErrInvalidParams},
		{"RemoveEmptyKey", func() error { return c.Remove(ctx, "", true) }, store.ErrInvalidParams},
		{"RemoveMissing", func() error { return c.Remove(ctx, "bad/missing", true) }, store.ErrObjectNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, tc.name, tc.call(), tc.want)
		})
	}
	if st := stats(t, ctx, c); st.Objects != 0 || st.Used != 0 {
		t.Fatalf("bad inputs left state behind: %v", st)
	}
}

// TestUnreachableMaster: a client of a master that is not listening fails
// fast with RPC_FAIL instead of hanging.
func TestUnreachableMaster(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens on addr now

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	c, err := client.New(ctx, client.Config{MasterAddr: addr, Metadata: memmeta.New(), Transport: tcp.New(tcp.Config{}), LocalBufferSize: 1 << 20})
	took := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatalf("client of %s started", addr)
	}
	wantErr(t, "client.New with no master", err, store.ErrRPCFail)
	if took > 3*time.Second {
		t.Fatalf("client.New took %v to fail", took)
	}
	t.Logf("failed after %v: %v", took, err)
}

// TestConcurrentClients: goroutines on two clients put and get distinct
// keys at once; each value is read back through the other client.
func TestConcurrentClients(t *testing.T) {
	cl, a := startPool(t, master.Config{})
	b := newClient(t, cl, "client-b")
	clients := []*client.Client{a, b}
	ctx := testContext(t)

	const workers, perWorker = 4, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := newRand(t, uint64(100+w))
			writer, reader := clients[w%2], clients[(w+1)%2]
			keys := make([]string, perWorker)
			vals := make([][]byte, perWorker)
			for i := range perWorker {
				keys[i] = fmt.Sprintf("cc/%d/%02d", w, i)
				vals[i] = randBytes(r, 1+r.IntN(16<<10))
				if err := writer.Put(ctx, keys[i], vals[i], nil); err != nil {
					t.Errorf("put %q: %v", keys[i], err)
					return
				}
				got, err := reader.Get(ctx, keys[i])
				if err != nil {
					t.Errorf("get %q: %v", keys[i], err)
					return
				}
				if !bytes.Equal(got, vals[i]) {
					t.Errorf("get %q: content differs at %d", keys[i], firstDiff(got, vals[i]))
					return
				}
			}
			ok, err := writer.BatchIsExist(ctx, keys)
			if err != nil {
				t.Errorf("BatchIsExist: %v", err)
				return
			}
			for i, e := range ok {
				if !e {
					t.Errorf("key %q vanished", keys[i])
				}
			}
			for i := range keys {
				got, err := writer.Get(ctx, keys[i])
				if err != nil || !bytes.Equal(got, vals[i]) {
					t.Errorf("reread %q: %v (content equal %v)", keys[i], err, bytes.Equal(got, vals[i]))
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := stats(t, ctx, a); st.Objects != workers*perWorker || st.EvictedObjects != 0 {
		t.Fatalf("stats after the concurrent run: %v", st)
	}
}

// TestNodeVanishesWithoutUnmount: a storage node that stops pinging (its
// process died, so no unmount came) loses its segment once the master's
// client TTL passes; the pool keeps working with a node that joins later.
func TestNodeVanishesWithoutUnmount(t *testing.T) {
	const ttl = 300 * time.Millisecond
	cl, c := startPool(t, master.Config{ClientTTL: ttl})
	ctx := testContext(t)
	r := newRand(t, 8)

	// The default nodes ping every second, slower than the TTL: take them
	// out gracefully first. Unmount on close is synchronous.
	for i, n := range cl.Nodes {
		if err := n.Close(); err != nil {
			t.Fatalf("close node %d: %v", i, err)
		}
	}
	if st := stats(t, ctx, c); st.Segments != 0 || st.Capacity != 0 {
		t.Fatalf("stats after closing every node: %v", st)
	}

	// A node that will never ping again within the test.
	ghost, err := cl.NewClient(ctx, client.Config{LocalHostname: "ghost", GlobalSegmentSize: segmentSize, PingInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ghost.Close() }) // no-op (ErrClosed) after the close below
	v := randBytes(r, 4096)
	// The put races the TTL: it lands on the ghost or finds no segment.
	wrote := false
	switch err := c.Put(ctx, "ghost/k", v, nil); store.CodeOf(err) {
	case store.OK:
		wrote = true
	case store.NoAvailableHandle:
	default:
		t.Fatalf("put while the ghost is mounted: %v", err)
	}
	t.Logf("put before expiry landed: %v", wrote)
	// The process dies: its data plane goes away, no unmount is sent.
	if err := ghost.Engine().Close(); err != nil {
		t.Fatalf("close ghost engine: %v", err)
	}

	eventually(t, 10*time.Second, "ghost segment expires", func() error {
		st, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		if st.Segments != 0 || st.Capacity != 0 || st.Objects != 0 {
			return fmt.Errorf("stats %v", st)
		}
		return nil
	})
	_, err = c.Get(ctx, "ghost/k")
	wantErr(t, "get from an expired node", err, store.ErrObjectNotFound)
	wantErr(t, "put with no live node", c.Put(ctx, "ghost/k2", v, nil), store.ErrNoAvailableHandle)
	// Its late Close finds the segment already gone; it may say so, but it
	// must release everything (checked by the leak check in TestMain).
	if err := ghost.Close(); err != nil && store.CodeOf(err) != store.SegmentNotFound {
		t.Fatalf("close of an expired node: %v", err)
	}

	// A node that pings well within the TTL serves the pool.
	healthy, err := cl.NewClient(ctx, client.Config{LocalHostname: "healthy", GlobalSegmentSize: segmentSize, PingInterval: ttl / 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { healthy.Close() }) // no-op (ErrClosed) after the close below
	if err := c.Put(ctx, "ghost/k", v, nil); err != nil {
		t.Fatalf("put on the new node: %v", err)
	}
	mustGet(t, ctx, c, "ghost/k", v)
	if err := healthy.Close(); err != nil {
		t.Fatalf("close the new node: %v", err)
	}
}
