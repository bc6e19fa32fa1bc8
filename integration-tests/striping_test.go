package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/store/server"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/loopback"
)

// TestStripedValue stores a value larger than any one node's segment but
// smaller than the pool: the master stripes it over both segments and it
// reads back byte for byte over the tcp pool, through the copying and the
// zero-copy paths.
func TestStripedValue(t *testing.T) {
	_, c := startPool(t, master.Config{})
	ctx := testContext(t)
	r := newRand(t, 41)
	const size = segmentSize + segmentSize/2 // 6 MiB over two 4 MiB segments

	value := randBytes(r, size)
	if err := c.Put(ctx, "striped/copy", value, nil); err != nil {
		t.Fatalf("put %d bytes: %v", size, err)
	}
	mustGet(t, ctx, c, "striped/copy", value)

	info, err := c.Stat(ctx, "striped/copy")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != size || len(info.Replicas) != 1 || len(info.Replicas[0]) != 2 {
		t.Fatalf("stat: %+v; want one replica in two slices", info)
	}
	var sum uint64
	for _, p := range info.Replicas[0] {
		sum += p.Size
	}
	if sum != size || info.Replicas[0][0].Segment == info.Replicas[0][1].Segment {
		t.Fatalf("slices %+v", info.Replicas[0])
	}
	if st := stats(t, ctx, c); st.StripedPuts != 1 || st.Used != size {
		t.Fatalf("stats %v", st)
	}
	if err := c.Remove(ctx, "striped/copy", true); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, ctx, c); st.Used != 0 {
		t.Fatalf("used %d after removing the striped value", st.Used)
	}

	// Zero copy, from and into registered memory at unaligned offsets.
	src := registeredRegion(t, c, size+64)
	dst := registeredRegion(t, c, size+128)
	fillRandom(r, src)
	in := src[3 : 3+size]
	if err := c.PutFrom(ctx, "striped/zc", in, nil); err != nil {
		t.Fatal(err)
	}
	for i := range dst {
		dst[i] = 0xAA
	}
	n, err := c.GetInto(ctx, "striped/zc", dst[5:])
	if err != nil || n != size {
		t.Fatalf("GetInto = %d, %v", n, err)
	}
	if !bytes.Equal(dst[5:5+size], in) {
		t.Fatalf("zero-copy read differs at %d", firstDiff(dst[5:5+size], in))
	}
	if !bytes.Equal(dst[:5], bytes.Repeat([]byte{0xAA}, 5)) || !bytes.Equal(dst[5+size:], bytes.Repeat([]byte{0xAA}, len(dst)-5-size)) {
		t.Fatal("GetInto wrote outside the value")
	}

	// Larger than the free pool (striped/zc is leased by the read):
	// refused, nothing leaks.
	big := registeredRegion(t, c, poolSize)
	wantErr(t, "put more than the free pool", c.PutFrom(ctx, "striped/too-big", big[:poolSize-size+1], nil), store.ErrNoAvailableHandle)
	if st := stats(t, ctx, c); st.Used != size || st.Objects != 1 {
		t.Fatalf("a refused put leaked: %v", st)
	}
}

// TestStripedReplicasSurviveNodeLoss: two striped replicas of one value lie
// on disjoint segments, so losing a node keeps one readable.
func TestStripedReplicasSurviveNodeLoss(t *testing.T) {
	ctx := testContext(t)
	cl, err := localcluster.Start(ctx, localcluster.Options{Nodes: 4, SegmentSize: segmentSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	c := newClient(t, cl, "client")
	value := randBytes(newRand(t, 42), segmentSize+segmentSize/2)
	var partial []string
	opts := &client.PutOptions{ReplicaNum: 2, OnPartial: func(key string, made, asked int) {
		partial = append(partial, fmt.Sprintf("%s %d/%d", key, made, asked))
	}}
	if err := c.Put(ctx, "striped/2", value, opts); err != nil {
		t.Fatal(err)
	}
	if len(partial) != 0 {
		t.Fatalf("OnPartial called: %v", partial)
	}
	info, err := c.Stat(ctx, "striped/2")
	if err != nil || len(info.Replicas) != 2 {
		t.Fatalf("stat %+v, %v", info, err)
	}
	seen := map[string]bool{}
	for _, r := range info.Replicas {
		for _, p := range r {
			if seen[p.Segment] {
				t.Fatalf("segment %s holds two slices: %+v", p.Segment, info.Replicas)
			}
			seen[p.Segment] = true
		}
	}
	// Close a node holding a slice of the first replica.
	victim := info.Replicas[0][0].Segment
	for i, n := range cl.Nodes {
		if fmt.Sprintf("node-%d", i) == victim {
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustGet(t, ctx, c, "striped/2", value)
	if info, err := c.Stat(ctx, "striped/2"); err != nil || len(info.Replicas) != 1 {
		t.Fatalf("after losing %s: %+v, %v", victim, info, err)
	}
}

// TestPartialReplication: asking for more replicas than there are segments
// stores what fits and says so through PutOptions.OnPartial and the
// master's partial_puts counter.
func TestPartialReplication(t *testing.T) {
	_, c := startPool(t, master.Config{})
	ctx := testContext(t)
	var mu sync.Mutex
	var got []string
	opts := &client.PutOptions{ReplicaNum: 3, OnPartial: func(key string, made, asked int) {
		mu.Lock()
		got = append(got, fmt.Sprintf("%s %d/%d", key, made, asked))
		mu.Unlock()
	}}
	if err := c.Put(ctx, "partial/1", []byte("value"), opts); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "partial/1 2/3" {
		t.Fatalf("OnPartial calls %v", got)
	}
	if st := stats(t, ctx, c); st.PartialPuts != 1 {
		t.Fatalf("partial_puts %d", st.PartialPuts)
	}
	n, err := c.GetSize(ctx, "partial/1")
	if err != nil || n != 5 {
		t.Fatalf("GetSize = %d, %v", n, err)
	}
}

// TestAdminCalls drives the operator calls through a Client and an Admin.
func TestAdminCalls(t *testing.T) {
	cl, c := startPool(t, master.Config{})
	ctx := testContext(t)
	for i := range 5 {
		if err := c.Put(ctx, fmt.Sprintf("adm/%d", i), []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Put(ctx, "adm/hard", []byte("pinned"), &client.PutOptions{WithHardPin: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "other/soft", []byte("pinned"), &client.PutOptions{WithSoftPin: true}); err != nil {
		t.Fatal(err)
	}
	a, err := client.DialAdmin(cl.Master.RPCAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	segs, err := a.ListSegments(ctx)
	if err != nil || len(segs) != poolNodes || segs[0].Size != segmentSize || segs[0].Protocol != "tcp" {
		t.Fatalf("ListSegments = %+v, %v", segs, err)
	}
	if q, err := c.QuerySegment(ctx, segs[1].ID); err != nil || q != segs[1] {
		t.Fatalf("QuerySegment = %+v, %v; want %+v", q, err, segs[1])
	}
	_, err = a.QuerySegment(ctx, "no-such-segment")
	wantErr(t, "QuerySegment(unknown)", err, store.ErrSegmentNotFound)

	keys, total, err := a.ListKeys(ctx, "adm/", 3)
	if err != nil || total != 6 || len(keys) != 3 || keys[0].Key != "adm/0" || !keys[0].Complete || keys[0].Size != 1 {
		t.Fatalf("ListKeys = %+v, %d, %v", keys, total, err)
	}
	_, _, err = c.ListKeys(ctx, "", -1)
	wantErr(t, "ListKeys(limit -1)", err, store.ErrInvalidParams)

	sizes, errs := c.BatchGetSize(ctx, []string{"adm/1", "nope", ""})
	if sizes[0] != 1 || errs[0] != nil {
		t.Fatalf("BatchGetSize[0] = %d, %v", sizes[0], errs[0])
	}
	wantErr(t, "GetSize(nope)", errs[1], store.ErrObjectNotFound)
	wantErr(t, "GetSize(empty)", errs[2], store.ErrInvalidParams)

	errs = c.BatchRemove(ctx, []string{"adm/0", "nope", "adm/hard"}, false)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	wantErr(t, "BatchRemove(nope)", errs[1], store.ErrObjectNotFound)
	wantErr(t, "BatchRemove(hard-pinned)", errs[2], store.ErrObjectHasLease)

	_, err = a.RemoveByRegex(ctx, "(", false)
	wantErr(t, "RemoveByRegex(bad)", err, store.ErrInvalidParams)
	if n, err := c.RemoveByRegex(ctx, "^adm/[0-9]$", false); err != nil || n != 4 {
		t.Fatalf("RemoveByRegex = %d, %v", n, err)
	}
	if n, err := a.RemoveAll(ctx, false); err != nil || n != 2 { // adm/hard and other/soft
		t.Fatalf("RemoveAll = %d, %v", n, err)
	}
	if st := stats(t, ctx, c); st.Objects != 0 || st.Used != 0 {
		t.Fatalf("stats after RemoveAll: %v", st)
	}

	// An unreachable master is RPC_FAIL, not a hang.
	dead, err := client.DialAdmin("127.0.0.1:1", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	_, err = dead.ListSegments(context.Background())
	if code := store.CodeOf(err); code != store.RPCFail && code != store.RPCTimeout {
		t.Fatalf("ListSegments on a dead master: %v", err)
	}
}

// TestStripedReadAfterLease: a striped read that finishes after its lease
// fails with LEASE_EXPIRED instead of returning bytes, even when only one
// slice is slow. A loopback network with a delay hook makes the slow read
// deterministic.
func TestStripedReadAfterLease(t *testing.T) {
	const lease = 300 * time.Millisecond
	p, err := server.Start(server.ProcessConfig{
		Master:  master.Config{DefaultLeaseTTL: lease, ClientTTL: time.Hour},
		RPCAddr: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx := testContext(t)
	meta, hub := memmeta.New(), loopback.NewHub()
	start := func(name string, segment, buffer uint64) *client.Client {
		c, err := client.New(ctx, client.Config{LocalHostname: name, MasterAddr: p.RPCAddr, Metadata: meta,
			Transport: hub.Transport(), GlobalSegmentSize: segment, LocalBufferSize: buffer})
		if err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	start("ln-0", 1<<20, 0)
	start("ln-1", 1<<20, 0)
	c := start("reader", 0, 4<<20)

	value := randBytes(newRand(t, 43), 3<<19) // 1.5 MiB over two 1 MiB segments
	if err := c.Put(ctx, "lease/striped", value, nil); err != nil {
		t.Fatal(err)
	}
	info, err := c.Stat(ctx, "lease/striped")
	if err != nil || len(info.Replicas) != 1 || len(info.Replicas[0]) != 2 {
		t.Fatalf("stat %+v, %v; want one striped replica", info, err)
	}
	mustGet(t, ctx, c, "lease/striped", value)

	// Delay reads of the second slice past the lease.
	slow := info.Replicas[0][1]
	hub.SetHook(func(hctx context.Context, call loopback.Call) loopback.Fault {
		if call.Op == transfer.Read && call.Addr == slow.Addr {
			select {
			case <-time.After(2 * lease):
			case <-hctx.Done():
			}
		}
		return loopback.Pass
	})
	_, err = c.Get(ctx, "lease/striped")
	wantErr(t, "get with a slow slice", err, store.ErrLeaseExpired)
	dst := registeredRegion(t, c, len(value))
	n, err := c.GetInto(ctx, "lease/striped", dst)
	wantErr(t, "GetInto with a slow slice", err, store.ErrLeaseExpired)
	if n != 0 {
		t.Fatalf("GetInto reported %d bytes after the lease", n)
	}
	hub.SetHook(nil)
	mustGet(t, ctx, c, "lease/striped", value)
}

// TestScatterListPutGet stores values given as scatter lists of unequal
// registered parts (as a KV block spread over per-layer regions), one of
// them striped over both segments so that slice and part boundaries cross,
// and reads them back into differently cut scatter lists: the bytes match
// and nothing outside the parts is written.
func TestScatterListPutGet(t *testing.T) {
	_, c := startPool(t, master.Config{})
	ctx := testContext(t)
	r := newRand(t, 43)
	src := registeredRegion(t, c, 2*segmentSize)
	dst := registeredRegion(t, c, 2*segmentSize)
	fillRandom(r, src)
	cut := func(buf []byte, sizes ...int) (parts [][]byte, total int) {
		for _, n := range sizes {
			parts = append(parts, buf[total:total+n])
			total += n
		}
		return parts, total
	}
	small, smallLen := cut(src, 100, 4096, 1, 7000)
	big, bigLen := cut(src[16384:], segmentSize/3, segmentSize/2, segmentSize/2, 12345) // > one segment: striped
	errs := c.BatchPutFromParts(ctx, []string{"sg/small", "sg/big"}, [][][]byte{small, big}, nil)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if info, err := c.Stat(ctx, "sg/big"); err != nil || info.Size != uint64(bigLen) || len(info.Replicas[0]) != 2 {
		t.Fatalf("stat sg/big = %+v, %v; want %d bytes in two slices", info, err, bigLen)
	}
	for i := range dst {
		dst[i] = 0xAA
	}
	dsmall, _ := cut(dst, 3000, smallLen-3000)
	dbig, _ := cut(dst[smallLen+64:], 1, bigLen-2, 1+10) // 10 spare bytes at the end
	n, gerrs := c.BatchGetIntoParts(ctx, []string{"sg/small", "sg/big"}, [][][]byte{dsmall, dbig})
	if gerrs[0] != nil || gerrs[1] != nil || n[0] != smallLen || n[1] != bigLen {
		t.Fatalf("get = %v, %v", n, gerrs)
	}
	if !bytes.Equal(dst[:smallLen], src[:smallLen]) {
		t.Fatalf("small value differs at %d", firstDiff(dst[:smallLen], src[:smallLen]))
	}
	got := dst[smallLen+64 : smallLen+64+bigLen]
	if want := src[16384 : 16384+bigLen]; !bytes.Equal(got, want) {
		t.Fatalf("striped value differs at %d", firstDiff(got, want))
	}
	for _, span := range [][2]int{{smallLen, smallLen + 64}, {smallLen + 64 + bigLen, len(dst)}} {
		if !bytes.Equal(dst[span[0]:span[1]], bytes.Repeat([]byte{0xAA}, span[1]-span[0])) {
			t.Fatalf("bytes [%d,%d) outside the parts were written", span[0], span[1])
		}
	}
	// Too small a scatter list: BUFFER_OVERFLOW, nothing read.
	if _, gerrs := c.BatchGetIntoParts(ctx, []string{"sg/small"}, [][][]byte{{dst[:10], dst[20:30]}}); !errors.Is(gerrs[0], store.ErrBufferOverflow) {
		t.Fatalf("short scatter list: %v, want BUFFER_OVERFLOW", gerrs[0])
	}
	// An empty value is refused per key; the other key still lands.
	errs = c.BatchPutFromParts(ctx, []string{"sg/empty", "sg/ok"}, [][][]byte{{}, small}, nil)
	if !errors.Is(errs[0], store.ErrInvalidParams) || errs[1] != nil {
		t.Fatalf("empty value: %v", errs)
	}
}
