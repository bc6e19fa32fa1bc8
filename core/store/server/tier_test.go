package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// TestTierRPCs drives the SSD tier over gRPC as an owner and a reader do:
// the owner long-polls for tasks and is woken by the read that needs a
// load; the reader's GetReplicaList waits for the load and gets the staged
// replica (or OBJECT_NOT_FOUND when the load failed); the metrics count
// offloads, disk hits and misses.
func TestTierRPCs(t *testing.T) {
	h := newHarness(t, func(c *master.Config) {
		c.EnableOffload = true
		c.EvictionHighWatermark, c.EvictionRatio = 0.01, 1
	})
	seg := pbSeg("a", 1<<32, 4096)
	h.mount(t, "node", seg)
	st, err := h.client.MountLocalDisk(ctx(t), &pb.MountLocalDiskRequest{ClientId: "node", SegmentId: "a", Capacity: 0})
	if err != nil || store.ErrorCode(st.GetCode()) != store.InvalidParams {
		t.Fatalf("mount disk of capacity 0: %v %v", st, err)
	}
	st, err = h.client.MountLocalDisk(ctx(t), &pb.MountLocalDiskRequest{ClientId: "node", SegmentId: "a", Capacity: 1e6})
	if err != nil || st.GetCode() != 0 {
		t.Fatalf("mount disk: %v %v", st, err)
	}
	poll := func(wait time.Duration) []*pb.TierTask {
		t.Helper()
		r, err := h.client.PollTierTasks(ctx(t), &pb.PollTierTasksRequest{ClientId: "node", SegmentId: "a", Max: 8, WaitMs: uint32(wait.Milliseconds())})
		if err != nil || r.GetStatus().GetCode() != 0 {
			t.Fatalf("poll: %v %v", r, err)
		}
		return r.Tasks
	}
	complete := func(tasks []*pb.TierTask, ok bool) *pb.StatusList {
		t.Helper()
		var rs []*pb.TierTaskResult
		for _, x := range tasks {
			rs = append(rs, &pb.TierTaskResult{Kind: x.Kind, Key: x.Key, ObjectId: x.ObjectId, Ok: ok})
		}
		r, err := h.client.CompleteTierTasks(ctx(t), &pb.CompleteTierTasksRequest{ClientId: "node", SegmentId: "a", Results: rs})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, k := range []string{"x", "y"} {
		r, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{ClientId: "w", Keys: pb.Keys([]string{k}), Sizes: []uint64{100}})
		if err != nil || r.Results[0].GetStatus().GetCode() != 0 {
			t.Fatalf("put start %s: %v %v", k, r, err)
		}
		if e, err := h.client.BatchPutEnd(ctx(t), &pb.KeysRequest{ClientId: "w", Keys: pb.Keys([]string{k})}); err != nil || e.Results[0].GetCode() != 0 {
			t.Fatalf("put end %s: %v %v", k, e, err)
		}
	}
	// Write-through: both puts queued an offload.
	offloads := poll(0)
	if len(offloads) != 2 || offloads[0].Kind != 1 || string(offloads[0].Key) != "x" || offloads[0].Size != 100 || offloads[0].DeadlineMs == 0 {
		t.Fatalf("offload tasks %+v", offloads)
	}
	wantCodes(t, "complete offloads", complete(offloads, true).Results, store.OK, store.OK)
	wantCodes(t, "complete them again", complete(offloads, true).Results, store.TaskNotFound, store.TaskNotFound)
	h.srv.Do(func(m *master.Master) { m.Tick() }) // evicts the DRAM of both: they are on disk
	h.srv.Do(func(m *master.Master) {
		if st := m.Stats(); st.Used != 0 || st.DiskObjects != 2 {
			t.Fatalf("after eviction: %+v", st)
		}
	})

	read := func(key string) chan *pb.GetReplicaListResult {
		out := make(chan *pb.GetReplicaListResult, 1)
		go func() {
			r, err := h.client.BatchGetReplicaList(ctx(t), &pb.KeysRequest{Keys: pb.Keys([]string{key})})
			if err != nil {
				out <- &pb.GetReplicaListResult{Status: &pb.Status{Code: int32(store.RPCFail), Message: err.Error()}}
				return
			}
			out <- r.Results[0]
		}()
		return out
	}
	// x: the read waits; the owner's poll is woken by the load it queued.
	got := read("x")
	loads := poll(20 * time.Second)
	if len(loads) != 1 || loads[0].Kind != 2 || string(loads[0].Key) != "x" || loads[0].Addr < seg.Base || loads[0].Addr+100 > seg.Base+seg.Size {
		t.Fatalf("load tasks %+v", loads)
	}
	wantCodes(t, "complete load", complete(loads, true).Results, store.OK)
	r := <-got
	if r.GetStatus().GetCode() != 0 || len(r.Replicas) != 1 || r.Replicas[0].Addr != loads[0].Addr || r.Replicas[0].Type != 0 || r.LeaseTtlMs < 10000 {
		t.Fatalf("read of x: %+v", r)
	}
	// y: the load fails (a corrupt file): the read is a miss.
	got = read("y")
	loads = poll(20 * time.Second)
	if len(loads) != 1 || string(loads[0].Key) != "y" {
		t.Fatalf("load tasks %+v", loads)
	}
	wantCodes(t, "complete failed load", complete(loads, false).Results, store.OK)
	r = <-got
	if store.ErrorCode(r.GetStatus().GetCode()) != store.ObjectNotFound || !strings.Contains(r.GetStatus().GetMessage(), "disk copy") || len(r.Replicas) != 0 {
		t.Fatalf("read of y after a failed load: %+v", r)
	}

	rec := httptest.NewRecorder()
	h.srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	text := rec.Body.String()
	for _, want := range []string{
		"master_offload_success_total 2",
		"master_file_cache_hit_nums 1",
		"master_file_cache_miss_nums 1",
		"master_local_disk_capacity_bytes 1e+06",
		"master_local_disk_key_count 1",
		"master_local_disk_used_bytes 100",
		`master_segment_disk_capacity_bytes{segment="node-a",segment_id="a"} 1e+06`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	sr, err := h.client.GetStats(ctx(t), &pb.StatsRequest{})
	if err != nil || sr.DiskHits != 1 || sr.DiskMisses != 1 || sr.Offloads != 2 || sr.DiskObjects != 1 || sr.SegmentStats[0].DiskCapacity != 1e6 {
		t.Fatalf("GetStats: %+v %v", sr, err)
	}
	// Stat shows x's DRAM and LOCAL_DISK replicas.
	gs, err := h.client.BatchGetSize(ctx(t), &pb.KeysRequest{Keys: pb.Keys([]string{"x"})})
	if err != nil || len(gs.Results[0].GetInfo().GetReplicas()) != 2 || gs.Results[0].Info.Replicas[1].Type != 1 || gs.Results[0].Info.ObjectId == 0 {
		t.Fatalf("stat x: %+v %v", gs, err)
	}
	// Unmounting the tier, then polling, is UNABLE_OFFLOAD.
	if st, err := h.client.UnmountLocalDisk(ctx(t), &pb.UnmountSegmentRequest{ClientId: "node", SegmentId: "a"}); err != nil || st.GetCode() != 0 {
		t.Fatalf("unmount disk: %v %v", st, err)
	}
	pr, err := h.client.PollTierTasks(ctx(t), &pb.PollTierTasksRequest{ClientId: "node", SegmentId: "a", Max: 1})
	if err != nil || store.ErrorCode(pr.GetStatus().GetCode()) != store.UnableOffload {
		t.Fatalf("poll without a tier: %v %v", pr, err)
	}
}
