package ha

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/mooncake-go/mooncake/core/store/master"
)

// TestReplicateDiskTier replicates a master with disk tiers through a real
// etcd: tiers are attached, objects offloaded (their DRAM evicted, so
// some live only on disk), staged back by reads, and their files evicted,
// with snapshots at random points. After each sync a master loaded from
// etcd (without enable_offload: restoring does not need it) holds exactly
// the leader's objects, LOCAL_DISK replicas and object ids included, and
// its tiers.
func TestReplicateDiskTier(t *testing.T) {
	cli := etcdClient(t)
	ctx := testCtx(t)
	const cluster = "disk-tier"
	m, err := master.New(master.Config{Rand: rand.New(rand.NewPCG(8, 5)), EvictionHighWatermark: 0.6, EvictionRatio: 0.2,
		EnableOffload: true, OffloadOnEvict: true})
	if err != nil {
		t.Fatal(err)
	}
	l := &locked{m: m}
	rep := NewReplicator(ReplicatorConfig{Client: cli, ClusterID: cluster, Do: l.Do, SnapshotEvery: -1, SnapshotInterval: -1, MaxBatchBytes: 600})
	defer rep.Close()
	rep.Attach(l.m)
	rng := rand.New(rand.NewPCG(5, 6))
	l.Do(func(m *master.Master) {
		for i := range 2 {
			id := fmt.Sprint("s", i)
			if err := m.MountSegment(seg(id, 32<<10), "node"); err != nil {
				t.Fatal(err)
			}
			if err := m.MountLocalDisk(id, "node", 1<<20); err != nil {
				t.Fatal(err)
			}
		}
	})
	var sawDiskOnly, snapshots int
	for step := range 60 {
		l.Do(func(m *master.Master) {
			for range 1 + rng.IntN(6) {
				key := fmt.Sprintf("key-%d", rng.IntN(40))
				id := fmt.Sprint("s", rng.IntN(2))
				switch op := rng.IntN(12); {
				case op < 5:
					if _, err := m.PutStart("w", key, uint64(1+rng.IntN(6<<10)), master.ReplicaConfig{ReplicaNum: 1}); err == nil {
						_ = m.PutEnd("w", key)
					}
				case op < 6:
					_ = m.Remove(key, true)
				case op < 7:
					m.Tick()
				case op < 9:
					_, _, _, _ = m.GetOrLoad(key)
				case op < 11:
					ts, err := m.TakeTierTasks(id, "node", 4)
					if err != nil {
						continue
					}
					for _, task := range ts {
						_ = m.CompleteTierTask(id, "node", master.TaskResult{Kind: task.Kind, Key: task.Key, ObjectID: task.ObjectID, OK: rng.IntN(6) != 0})
					}
				default:
					if in, err := m.Stat(key); err == nil {
						for _, r := range in.Replicas {
							if r.Type == master.ReplicaLocalDisk {
								_ = m.CompleteTierTask(r.SegmentID, "node", master.TaskResult{Kind: master.TaskDiskEvicted, Key: key, ObjectID: in.ID})
							}
						}
					}
				}
			}
		})
		if err := rep.Sync(ctx); err != nil {
			t.Fatalf("step %d: Sync: %v", step, err)
		}
		if rng.IntN(10) == 0 {
			if err := rep.Snapshot(ctx); err != nil {
				t.Fatalf("step %d: Snapshot: %v", step, err)
			}
			snapshots++
		}
		var want master.State
		l.Do(func(m *master.Master) { want = canonical(m.Dump()) })
		for _, o := range want.Objects {
			if o.Disk != "" && len(o.Replicas) == 0 {
				sawDiskOnly++
			}
		}
		got, _ := loadFresh(t, ctx, cli, cluster)
		if g := canonical(got.Dump()); !reflect.DeepEqual(g, want) {
			t.Fatalf("step %d: loaded table differs:\n got %+v\nwant %+v", step, g, want)
		}
		if want.Segments[0].DiskCapacity != 1<<20 {
			t.Fatalf("step %d: tier capacity %d not replicated", step, want.Segments[0].DiskCapacity)
		}
	}
	var st master.Stats
	l.Do(func(m *master.Master) { st = m.Stats() })
	t.Logf("%d offloads, %d loads, %d disk evictions, %d disk-only sightings, %d snapshots", st.Offloads, st.DiskHits, st.DiskEvictions, sawDiskOnly, snapshots)
	if st.Offloads == 0 || st.DiskHits == 0 || sawDiskOnly == 0 || snapshots == 0 {
		t.Fatal("the walk missed the disk tier; adjust its weights")
	}
}
