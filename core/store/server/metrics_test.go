package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// TestSegmentMetrics scrapes /metrics and checks the per-segment series
// (allocated, capacity, usage ratio, keys) and the pool-wide eviction and
// allocation series, before and after an unmount.
func TestSegmentMetrics(t *testing.T) {
	h := newHarness(t)
	h.mount(t, "c1", pbSeg("a", 1<<32, 4096), pbSeg("b", 2<<32, 2048))
	// Fill segment b exactly with one 2048-byte object (placement may pick
	// either segment; a preferred segment pins it), then one 1024-byte
	// object in a, and ask for more than any segment has free (nothing is
	// evictable: both objects are still being written).
	if r, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{ClientId: "c1", Keys: pb.Keys([]string{"x"}), Sizes: []uint64{2048},
		Config: &pb.ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-b"}}); err != nil || r.Results[0].GetStatus().GetCode() != 0 {
		t.Fatalf("put x: %v %v", r, err)
	}
	if r, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{ClientId: "c1", Keys: pb.Keys([]string{"y"}), Sizes: []uint64{1024},
		Config: &pb.ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-a"}}); err != nil || r.Results[0].GetStatus().GetCode() != 0 {
		t.Fatalf("put y: %v %v", r, err)
	}
	if _, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{ClientId: "c1", Keys: pb.Keys([]string{"big"}), Sizes: []uint64{4000}}); err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		h.srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("/metrics: %d", rec.Code)
		}
		return rec.Body.String()
	}
	text := scrape()
	for _, want := range []string{
		`master_segment_capacity_bytes{segment="node-a",segment_id="a"} 4096`,
		`master_segment_capacity_bytes{segment="node-b",segment_id="b"} 2048`,
		`master_segment_allocated_bytes{segment="node-a",segment_id="a"} 1024`,
		`master_segment_allocated_bytes{segment="node-b",segment_id="b"} 2048`,
		`master_segment_usage_ratio{segment="node-a",segment_id="a"} 0.25`,
		`master_segment_usage_ratio{segment="node-b",segment_id="b"} 1`,
		`master_segment_key_count{segment="node-a",segment_id="a"} 1`,
		`master_segment_key_count{segment="node-b",segment_id="b"} 1`,
		"master_allocated_bytes 3072",
		"master_total_capacity_bytes 6144",
		"master_put_start_alloc_failures_total 1",
		"# TYPE master_attempted_evictions_total counter",
		"# TYPE master_segment_allocated_bytes gauge",
		"master_put_start_discarded_staging_size 0",
		"master_soft_pin_key_count 0",
		"master_hard_pin_key_count 0",
		"master_put_start_partial_allocations_total 0",
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(text, "master_attempted_evictions_total ") {
		t.Errorf("/metrics lacks master_attempted_evictions_total")
	}

	st, err := h.client.UnmountSegment(ctx(t), &pb.UnmountSegmentRequest{ClientId: "c1", SegmentId: "b"})
	if err != nil || st.GetCode() != 0 {
		t.Fatalf("unmount b: %v %v", st, err)
	}
	text = scrape()
	if strings.Contains(text, `segment_id="b"`) {
		t.Errorf("/metrics still has series of unmounted segment b")
	}
	if !strings.Contains(text, `master_segment_capacity_bytes{segment="node-a",segment_id="a"} 4096`+"\n") {
		t.Errorf("/metrics lost segment a after unmounting b")
	}
}
