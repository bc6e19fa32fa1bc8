package server

import (
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// st1 wraps one status for wantCodes.
func st1(s *pb.Status) []*pb.Status { return []*pb.Status{s} }

// TestSingleKeyRPCs walks one key through the single-key forms and checks
// every error code they report.
func TestSingleKeyRPCs(t *testing.T) {
	h := newHarness(t)
	c := h.client
	h.mount(t, "c1", pbSeg("a", 1<<32, 4096), pbSeg("b", 2<<32, 4096))
	long := strings.Repeat("x", master.MaxKeyLen+1)
	key := func(client, k string, force bool) *pb.KeyRequest {
		return &pb.KeyRequest{ClientId: client, Key: []byte(k), Force: force}
	}

	for _, tc := range []struct {
		name string
		req  *pb.PutStartRequest
		want store.ErrorCode
		n    int // replicas
	}{
		{"ok", &pb.PutStartRequest{ClientId: "c1", Key: []byte("k"), Size: 100, Config: &pb.ReplicaConfig{ReplicaNum: 2}}, store.OK, 2},
		{"nil config is one replica", &pb.PutStartRequest{ClientId: "c1", Key: []byte("one"), Size: 100}, store.OK, 1},
		{"again", &pb.PutStartRequest{ClientId: "c2", Key: []byte("k"), Size: 100}, store.ObjectAlreadyExists, 0},
		{"empty key", &pb.PutStartRequest{ClientId: "c1", Size: 100}, store.InvalidParams, 0},
		{"key too long", &pb.PutStartRequest{ClientId: "c1", Key: []byte(long), Size: 100}, store.InvalidKey, 0},
		{"size 0", &pb.PutStartRequest{ClientId: "c1", Key: []byte("z"), Size: 0}, store.InvalidParams, 0},
		{"zero replicas", &pb.PutStartRequest{ClientId: "c1", Key: []byte("z"), Size: 10, Config: &pb.ReplicaConfig{}}, store.InvalidParams, 0},
		{"oversize value", &pb.PutStartRequest{ClientId: "c1", Key: []byte("z"), Size: 1 << 40}, store.NoAvailableHandle, 0},
		{"more replicas than segments", &pb.PutStartRequest{ClientId: "c1", Key: []byte("few"), Size: 64, Config: &pb.ReplicaConfig{ReplicaNum: 3}}, store.OK, 2},
	} {
		t.Run("PutStart "+tc.name, func(t *testing.T) {
			r, err := c.PutStart(ctx(t), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			wantCodes(t, "PutStart", st1(r.GetStatus()), tc.want)
			if len(r.GetReplicas()) != tc.n {
				t.Fatalf("%d replicas, want %d", len(r.GetReplicas()), tc.n)
			}
		})
	}

	calls := []struct {
		name string
		call func() (*pb.Status, error)
		want store.ErrorCode
	}{
		{"PutEnd other client", func() (*pb.Status, error) { return c.PutEnd(ctx(t), key("c2", "k", false)) }, store.IllegalClient},
		{"PutEnd unknown", func() (*pb.Status, error) { return c.PutEnd(ctx(t), key("c1", "nope", false)) }, store.ObjectNotFound},
		{"PutRevoke other client", func() (*pb.Status, error) { return c.PutRevoke(ctx(t), key("c2", "one", false)) }, store.IllegalClient},
		{"PutRevoke ok", func() (*pb.Status, error) { return c.PutRevoke(ctx(t), key("c1", "one", false)) }, store.OK},
		{"PutRevoke unknown", func() (*pb.Status, error) { return c.PutRevoke(ctx(t), key("c1", "one", false)) }, store.ObjectNotFound},
		{"Remove being written", func() (*pb.Status, error) { return c.Remove(ctx(t), key("", "k", true)) }, store.ReplicaIsNotReady},
		{"PutEnd ok", func() (*pb.Status, error) { return c.PutEnd(ctx(t), key("c1", "k", false)) }, store.OK},
		{"PutEnd idempotent", func() (*pb.Status, error) { return c.PutEnd(ctx(t), key("c1", "k", false)) }, store.OK},
		{"PutRevoke complete", func() (*pb.Status, error) { return c.PutRevoke(ctx(t), key("c1", "k", false)) }, store.InvalidWrite},
		{"Remove empty key", func() (*pb.Status, error) { return c.Remove(ctx(t), key("", "", false)) }, store.InvalidParams},
		{"Remove unknown", func() (*pb.Status, error) { return c.Remove(ctx(t), key("", "nope", false)) }, store.ObjectNotFound},
	}
	for _, tc := range calls {
		s, err := tc.call()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		wantCodes(t, tc.name, st1(s), tc.want)
	}

	for _, tc := range []struct {
		k    string
		want store.ErrorCode
		n    int
	}{{"k", store.OK, 2}, {"few", store.ReplicaIsNotReady, 0}, {"nope", store.ObjectNotFound, 0}, {"", store.InvalidParams, 0}, {long, store.InvalidKey, 0}} {
		r, err := c.GetReplicaList(ctx(t), key("", tc.k, false))
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "GetReplicaList("+tc.k[:min(len(tc.k), 8)]+")", st1(r.GetStatus()), tc.want)
		if len(r.GetReplicas()) != tc.n || (tc.n > 0 && r.GetLeaseTtlMs() != 10000) {
			t.Fatalf("GetReplicaList(%s): %v", tc.k, r)
		}
	}
	for _, tc := range []struct {
		k      string
		want   store.ErrorCode
		exists bool
	}{{"k", store.OK, true}, {"few", store.OK, false}, {"nope", store.OK, false}, {"", store.InvalidParams, false}} {
		r, err := c.ExistKey(ctx(t), key("", tc.k, false))
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "ExistKey("+tc.k+")", st1(r.GetStatus()), tc.want)
		if r.GetExists() != tc.exists {
			t.Fatalf("ExistKey(%s) = %v", tc.k, r.GetExists())
		}
	}
	// k is leased by the reads above.
	for _, tc := range []struct {
		force bool
		want  store.ErrorCode
	}{{false, store.ObjectHasLease}, {true, store.OK}, {true, store.ObjectNotFound}} {
		s, err := c.Remove(ctx(t), key("", "k", tc.force))
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "Remove(k)", st1(s), tc.want)
	}
}

func TestRemoveByRegexAndAll(t *testing.T) {
	h := newHarness(t)
	c := h.client
	h.mount(t, "c1", pbSeg("a", 1<<32, 1<<20))
	put := func(k string, cfg *pb.ReplicaConfig) {
		t.Helper()
		r, err := c.PutStart(ctx(t), &pb.PutStartRequest{ClientId: "c1", Key: []byte(k), Size: 64, Config: cfg})
		if err != nil || r.GetStatus().GetCode() != 0 {
			t.Fatalf("PutStart(%s): %v %v", k, r, err)
		}
		if s, err := c.PutEnd(ctx(t), &pb.KeyRequest{ClientId: "c1", Key: []byte(k)}); err != nil || s.GetCode() != 0 {
			t.Fatalf("PutEnd(%s): %v %v", k, s, err)
		}
	}
	for _, k := range []string{"a/1", "a/2", "a/3", "b/1", "b/2"} {
		put(k, nil)
	}
	put("a/hard", &pb.ReplicaConfig{ReplicaNum: 1, WithHardPin: true})
	if _, err := c.GetReplicaList(ctx(t), &pb.KeyRequest{Key: []byte("a/3")}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		re    string
		force bool
		want  store.ErrorCode
		n     int64
	}{
		{"(", false, store.InvalidParams, 0},
		{"", false, store.InvalidParams, 0},
		{"^a/", false, store.OK, 2}, // a/3 leased, a/hard pinned
		{"^a/", true, store.OK, 2},
		{"^a/", true, store.OK, 0},
	} {
		r, err := c.RemoveByRegex(ctx(t), &pb.RemoveByRegexRequest{Regex: tc.re, Force: tc.force})
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "RemoveByRegex("+tc.re+")", st1(r.GetStatus()), tc.want)
		if r.GetCount() != tc.n {
			t.Fatalf("RemoveByRegex(%q, %v) removed %d, want %d", tc.re, tc.force, r.GetCount(), tc.n)
		}
	}
	if _, err := c.ExistKey(ctx(t), &pb.KeyRequest{Key: []byte("b/1")}); err != nil { // leases b/1
		t.Fatal(err)
	}
	for _, tc := range []struct {
		force bool
		n     int64
	}{{false, 1}, {true, 1}, {true, 0}} {
		r, err := c.RemoveAll(ctx(t), &pb.RemoveAllRequest{Force: tc.force})
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "RemoveAll", st1(r.GetStatus()), store.OK)
		if r.GetCount() != tc.n {
			t.Fatalf("RemoveAll(%v) removed %d, want %d", tc.force, r.GetCount(), tc.n)
		}
	}
}

func TestBatchGetSize(t *testing.T) {
	h := newHarness(t)
	c := h.client
	h.mount(t, "c1", pbSeg("a", 1<<32, 1024), pbSeg("b", 2<<32, 1024), pbSeg("c", 3<<32, 1024))
	for _, r := range []*pb.PutStartRequest{
		{ClientId: "c1", Key: []byte("small"), Size: 100, Config: &pb.ReplicaConfig{ReplicaNum: 2, WithSoftPin: true}},
		{ClientId: "c1", Key: []byte("big"), Size: 2500}, // striped over all three
		{ClientId: "c1", Key: []byte("writing"), Size: 10},
	} {
		if x, err := c.PutStart(ctx(t), r); err != nil || x.GetStatus().GetCode() != 0 {
			t.Fatalf("PutStart(%s): %v %v", r.Key, x, err)
		}
	}
	if _, err := c.BatchPutEnd(ctx(t), &pb.KeysRequest{ClientId: "c1", Keys: pb.Keys([]string{"small", "big"})}); err != nil {
		t.Fatal(err)
	}
	r, err := c.BatchGetSize(ctx(t), &pb.KeysRequest{Keys: pb.Keys([]string{"small", "big", "writing", "nope", ""})})
	if err != nil {
		t.Fatal(err)
	}
	var sts []*pb.Status
	for _, x := range r.GetResults() {
		sts = append(sts, x.GetStatus())
	}
	wantCodes(t, "BatchGetSize", sts, store.OK, store.OK, store.ReplicaIsNotReady, store.ObjectNotFound, store.InvalidParams)
	small, big := r.GetResults()[0], r.GetResults()[1]
	if small.GetSize() != 100 || len(small.GetInfo().GetReplicas()) != 2 || !small.GetInfo().GetSoftPin() || small.GetInfo().GetLeaseMsLeft() != 0 {
		t.Fatalf("small: %v", small)
	}
	if big.GetSize() != 2500 || len(big.GetInfo().GetReplicas()) != 1 || len(big.GetInfo().GetReplicas()[0].GetSlices()) != 3 {
		t.Fatalf("big: %v", big)
	}
	var sum uint64
	for _, s := range big.GetInfo().GetReplicas()[0].GetSlices() {
		sum += s.GetSize()
		if s.GetSegment() != "node-"+s.GetSegmentId() || s.GetAddr() == 0 {
			t.Fatalf("bad slice %v", s)
		}
	}
	if sum != 2500 {
		t.Fatalf("slices hold %d bytes", sum)
	}
	// GetSize granted no lease: small is removable without force.
	if s, err := c.Remove(ctx(t), &pb.KeyRequest{Key: []byte("small")}); err != nil || s.GetCode() != 0 {
		t.Fatalf("Remove after GetSize: %v %v", s, err)
	}
	// The striped replica is also what GetReplicaList returns.
	g, err := c.GetReplicaList(ctx(t), &pb.KeyRequest{Key: []byte("big")})
	if err != nil || len(g.GetReplicas()) != 1 || len(g.GetReplicas()[0].GetSlices()) != 3 || g.GetReplicas()[0].GetSegment() != "" {
		t.Fatalf("GetReplicaList(big) = %v, %v", g, err)
	}
}

func TestReMountSegmentRPC(t *testing.T) {
	h := newHarness(t)
	c := h.client
	segs := []*pb.Segment{pbSeg("a", 1<<32, 4096), pbSeg("b", 2<<32, 4096)}
	segs[1].HostId = "host-b"
	segs[1].Kind = pb.SegmentKind_SEGMENT_KIND_STANDALONE
	embeddedB := pbSeg("b", 2<<32, 4096) // b as mounted, but embedded
	embeddedB.HostId = "host-b"
	undefined, outOfRange := pbSeg("c", 3<<32, 64), pbSeg("c", 3<<32, 64)
	undefined.Kind, outOfRange.Kind = 9, 300
	for _, tc := range []struct {
		name string
		req  *pb.ReMountSegmentRequest
		want store.ErrorCode
	}{
		{"empty client", &pb.ReMountSegmentRequest{Segments: segs}, store.InvalidParams},
		{"ok", &pb.ReMountSegmentRequest{ClientId: "c1", Segments: segs}, store.OK},
		{"again is a no-op", &pb.ReMountSegmentRequest{ClientId: "c1", Segments: segs}, store.OK},
		{"another client", &pb.ReMountSegmentRequest{ClientId: "c2", Segments: segs[:1]}, store.SegmentAlreadyExists},
		{"nil segment", &pb.ReMountSegmentRequest{ClientId: "c1", Segments: []*pb.Segment{nil}}, store.InvalidParams},
		{"bad segment", &pb.ReMountSegmentRequest{ClientId: "c1", Segments: []*pb.Segment{pbSeg("c", 3<<32, 0)}}, store.InvalidParams},
		{"listed twice", &pb.ReMountSegmentRequest{ClientId: "c1", Segments: []*pb.Segment{pbSeg("c", 3<<32, 64), pbSeg("c", 3<<32, 64)}}, store.InvalidParams},
		{"another kind", &pb.ReMountSegmentRequest{ClientId: "c1", Segments: []*pb.Segment{embeddedB}}, store.SegmentAlreadyExists},
		{"undefined kind", &pb.ReMountSegmentRequest{ClientId: "c1", Segments: []*pb.Segment{undefined}}, store.InvalidParams},
		{"kind out of range", &pb.ReMountSegmentRequest{ClientId: "c1", Segments: []*pb.Segment{outOfRange}}, store.InvalidParams},
	} {
		s, err := c.ReMountSegment(ctx(t), tc.req)
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "ReMountSegment "+tc.name, st1(s), tc.want)
	}
	l, err := c.ListSegments(ctx(t), &pb.ListSegmentsRequest{})
	if err != nil || len(l.GetSegments()) != 2 {
		t.Fatalf("ListSegments = %v, %v", l, err)
	}
	if g := l.GetSegments()[1]; g.GetSegment().GetId() != "b" || g.GetSegment().GetHostId() != "host-b" || g.GetClientId() != "c1" ||
		g.GetSegment().GetSize() != 4096 || g.GetLargestFree() != 4096 || g.GetUsed() != 0 ||
		g.GetSegment().GetKind() != pb.SegmentKind_SEGMENT_KIND_STANDALONE {
		t.Fatalf("segment b: %v", g)
	}
	if g := l.GetSegments()[0]; g.GetSegment().GetKind() != pb.SegmentKind_SEGMENT_KIND_EMBEDDED {
		t.Fatalf("segment a, sent without a kind: %v", g)
	}
}

func TestQuerySegmentAndListKeys(t *testing.T) {
	h := newHarness(t)
	c := h.client
	h.mount(t, "c1", pbSeg("a", 1<<32, 4096))
	for _, k := range []string{"p/2", "p/1", "q/1"} {
		if r, err := c.PutStart(ctx(t), &pb.PutStartRequest{ClientId: "c1", Key: []byte(k), Size: 100}); err != nil || r.GetStatus().GetCode() != 0 {
			t.Fatal(r, err)
		}
	}
	if _, err := c.BatchPutEnd(ctx(t), &pb.KeysRequest{ClientId: "c1", Keys: pb.Keys([]string{"p/1", "q/1"})}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetReplicaList(ctx(t), &pb.KeyRequest{Key: []byte("p/1")}); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(time.Second)

	for _, tc := range []struct {
		id   string
		want store.ErrorCode
	}{{"a", store.OK}, {"zz", store.SegmentNotFound}, {"", store.InvalidParams}} {
		r, err := c.QuerySegment(ctx(t), &pb.QuerySegmentRequest{SegmentId: tc.id})
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "QuerySegment("+tc.id+")", st1(r.GetStatus()), tc.want)
		if tc.want == store.OK && (r.GetSegment().GetUsed() != 300 || r.GetSegment().GetObjects() != 3) {
			t.Fatalf("QuerySegment(a) = %v", r.GetSegment())
		}
	}

	r, err := c.ListKeys(ctx(t), &pb.ListKeysRequest{Limit: -1})
	if err != nil {
		t.Fatal(err)
	}
	wantCodes(t, "ListKeys(limit -1)", st1(r.GetStatus()), store.InvalidParams)
	r, err = c.ListKeys(ctx(t), &pb.ListKeysRequest{Prefix: []byte("p/"), Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantCodes(t, "ListKeys", st1(r.GetStatus()), store.OK)
	if r.GetTotal() != 2 || len(r.GetKeys()) != 1 {
		t.Fatalf("ListKeys(p/, 1) = %v", r)
	}
	k := r.GetKeys()[0]
	if string(k.GetKey()) != "p/1" || !k.GetComplete() || k.GetSize() != 100 || k.GetOwner() != "c1" || k.GetLeaseMsLeft() != 9000 || len(k.GetReplicas()) != 1 {
		t.Fatalf("p/1: %v", k)
	}
	r, err = c.ListKeys(ctx(t), &pb.ListKeysRequest{})
	if err != nil || r.GetTotal() != 3 || len(r.GetKeys()) != 3 || r.GetKeys()[1].GetComplete() {
		t.Fatalf("ListKeys() = %v, %v", r, err)
	}
}

func TestStatsPinsAndPartial(t *testing.T) {
	h := newHarness(t)
	c := h.client
	h.mount(t, "c1", pbSeg("a", 1<<32, 4096))
	for _, r := range []*pb.PutStartRequest{
		{ClientId: "c1", Key: []byte("s"), Size: 64, Config: &pb.ReplicaConfig{ReplicaNum: 2, WithSoftPin: true}},
		{ClientId: "c1", Key: []byte("h"), Size: 64, Config: &pb.ReplicaConfig{ReplicaNum: 1, WithHardPin: true}},
	} {
		if x, err := c.PutStart(ctx(t), r); err != nil || x.GetStatus().GetCode() != 0 {
			t.Fatal(x, err)
		}
	}
	st, err := c.GetStats(ctx(t), &pb.StatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetSoftPinned() != 1 || st.GetHardPinned() != 1 || st.GetPartialPuts() != 1 || st.GetClients() != 1 {
		t.Fatalf("stats %v", st)
	}
}
