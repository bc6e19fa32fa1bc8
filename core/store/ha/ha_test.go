package ha

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

const testTimeout = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// etcdClient starts an embedded etcd (skipped under -short) and returns a
// client of it, closed when t ends.
func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	ep := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// locked is a master behind a mutex, as server.Server keeps it.
type locked struct {
	mu sync.Mutex
	m  *master.Master
}

func (l *locked) Do(f func(m *master.Master)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l.m)
}

func newMaster(t *testing.T, seed uint64) *master.Master {
	t.Helper()
	m, err := master.New(master.Config{Rand: rand.New(rand.NewPCG(seed, 5)), EvictionHighWatermark: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func seg(id string, size uint64) master.Segment {
	return master.Segment{ID: id, Name: "node-" + id, Base: 1 << 30, Size: size, Protocol: "tcp"}
}

func canonical(st master.State) master.State {
	st.Objects = slices.Clone(st.Objects)
	slices.SortFunc(st.Objects, func(a, b master.ObjectRecord) int { return cmp.Compare(a.Key, b.Key) })
	return st
}

func loadFresh(t *testing.T, ctx context.Context, cli *clientv3.Client, cluster string) (*master.Master, LoadStats) {
	t.Helper()
	m := newMaster(t, 99)
	ls, err := Load(ctx, cli, cluster, m)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return m, ls
}

func countKeys(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// TestReplicateAndLoad runs random operations on a master whose replicator
// writes to a real etcd, with small batches and chunks and snapshots at
// random points, and checks after each sync that a master loaded from etcd
// holds exactly the leader's committed table.
func TestReplicateAndLoad(t *testing.T) {
	cli := etcdClient(t)
	ctx := testCtx(t)
	const cluster = "load-test"
	l := &locked{m: newMaster(t, 1)}
	rep := NewReplicator(ReplicatorConfig{Client: cli, ClusterID: cluster, Do: l.Do, SnapshotEvery: -1, SnapshotInterval: -1, MaxBatchBytes: 400})
	defer rep.Close()
	rep.Attach(l.m)
	rng := rand.New(rand.NewPCG(3, 4))
	l.Do(func(m *master.Master) {
		for i := range 3 {
			if err := m.MountSegment(seg(fmt.Sprint("s", i), 64<<10), "node"); err != nil {
				t.Fatal(err)
			}
		}
	})
	snapshots := 0
	for step := range 120 {
		l.Do(func(m *master.Master) {
			for range 1 + rng.IntN(6) {
				key := fmt.Sprintf("key-%d", rng.IntN(60))
				switch op := rng.IntN(10); {
				case op < 6:
					if _, err := m.PutStart("w", key, uint64(1+rng.IntN(8<<10)), master.ReplicaConfig{ReplicaNum: 1 + rng.IntN(2)}); err == nil {
						_ = m.PutEnd("w", key)
					}
				case op < 8:
					_ = m.Remove(key, true)
				case op < 9:
					m.Tick()
				default:
					id := fmt.Sprint("s", rng.IntN(4))
					if err := m.UnmountSegment(id, "node"); err != nil {
						_ = m.MountSegment(seg(id, 64<<10), "node")
					}
				}
			}
		})
		if err := rep.Sync(ctx); err != nil {
			t.Fatalf("step %d: Sync: %v", step, err)
		}
		if rng.IntN(15) == 0 {
			if err := rep.Snapshot(ctx); err != nil {
				t.Fatalf("step %d: Snapshot: %v", step, err)
			}
			snapshots++
		}
		if step%10 != 9 {
			continue
		}
		var want master.State
		l.Do(func(m *master.Master) { want = canonical(m.Dump()) })
		got, ls := loadFresh(t, ctx, cli, cluster)
		if g := canonical(got.Dump()); !reflect.DeepEqual(g, want) {
			t.Fatalf("step %d: loaded table differs:\n got %+v\nwant %+v", step, g, want)
		}
		if obs, _ := rep.Seqs(); ls.LastSeq != obs {
			t.Fatalf("step %d: loaded up to seq %d, leader observed %d", step, ls.LastSeq, obs)
		}
	}
	if snapshots == 0 {
		t.Fatal("no snapshot taken")
	}
	// A snapshot now truncates the log to at most one key.
	if err := rep.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	k := keysFor(cluster)
	if n := countKeys(t, ctx, cli, k.oplog()); n > 1 {
		t.Fatalf("%d oplog keys after a snapshot, want at most 1", n)
	}
	_, ls := loadFresh(t, ctx, cli, cluster)
	if obs, _ := rep.Seqs(); ls.SnapshotSeq != obs || ls.Replayed != 0 {
		t.Fatalf("after the final snapshot: %+v, observed %d", ls, obs)
	}
	t.Logf("load after final snapshot: %+v (%d snapshots)", ls, snapshots)
}

// TestFencedFailover: a leader resigns, a second candidate takes over and
// loads the table; the old leader's replicator can no longer write, and
// the new one continues the sequence.
func TestFencedFailover(t *testing.T) {
	cli := etcdClient(t)
	ctx := testCtx(t)
	const cluster = "fence-test"
	e1, err := NewElector(cli, cluster, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e2, _ := NewElector(cli, cluster, time.Second)
	t1, err := e1.Campaign(ctx, "10.0.0.1:50051")
	if err != nil {
		t.Fatal(err)
	}
	if addr, _, err := Leader(ctx, cli, cluster); err != nil || addr != "10.0.0.1:50051" {
		t.Fatalf("Leader = %q, %v", addr, err)
	}
	l1 := &locked{m: newMaster(t, 1)}
	r1 := NewReplicator(ReplicatorConfig{Client: cli, ClusterID: cluster, Fence: t1.Fence(), Do: l1.Do})
	defer r1.Close()
	r1.Attach(l1.m)
	put := func(l *locked, key string) {
		t.Helper()
		l.Do(func(m *master.Master) {
			if _, err := m.PutStart("w", key, 100, master.ReplicaConfig{ReplicaNum: 1}); err != nil {
				t.Fatal(err)
			}
			if err := m.PutEnd("w", key); err != nil {
				t.Fatal(err)
			}
		})
	}
	l1.Do(func(m *master.Master) {
		if err := m.MountSegment(seg("a", 1<<20), "node"); err != nil {
			t.Fatal(err)
		}
	})
	put(l1, "k1")
	if err := r1.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	type result struct {
		t   *Term
		err error
	}
	won := make(chan result, 1)
	go func() {
		tm, err := e2.Campaign(ctx, "10.0.0.2:50051")
		won <- result{tm, err}
	}()
	// Abandoning (a crash) hands over only when the 1 s lease expires.
	start := time.Now()
	t1.Abandon()
	r := <-won
	if r.err != nil {
		t.Fatal(r.err)
	}
	t2 := r.t
	defer t2.Resign(context.Background())
	t.Logf("takeover after an abandoned lease: %v", time.Since(start))
	select {
	case <-t1.Done():
	case <-ctx.Done():
		t.Fatal("old term not done")
	}
	// The old leader's next write is refused.
	put(l1, "k2")
	if err := r1.Sync(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("old leader's Sync after takeover: %v, want ErrNotLeader", err)
	}
	select {
	case <-r1.Failed():
	default:
		t.Fatal("old replicator not failed")
	}
	if addr, _, err := Leader(ctx, cli, cluster); err != nil || addr != "10.0.0.2:50051" {
		t.Fatalf("Leader = %q, %v", addr, err)
	}
	m2, ls := loadFresh(t, ctx, cli, cluster)
	if ls.Objects != 1 || ls.Segments != 1 {
		t.Fatalf("new leader loaded %+v, want k1 and one segment", ls)
	}
	if _, _, err := m2.GetReplicaList("k1"); err != nil {
		t.Fatalf("k1 on the new leader: %v", err)
	}
	l2 := &locked{m: m2}
	r2 := NewReplicator(ReplicatorConfig{Client: cli, ClusterID: cluster, Fence: t2.Fence(), NextSeq: ls.LastSeq + 1, Do: l2.Do})
	defer r2.Close()
	r2.Attach(m2)
	put(l2, "k3")
	if err := r2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	m3, ls3 := loadFresh(t, ctx, cli, cluster)
	if ls3.LastSeq != ls.LastSeq+1 || ls3.Objects != 2 {
		t.Fatalf("after the new leader's put: %+v", ls3)
	}
	if _, _, err := m3.GetReplicaList("k2"); err == nil {
		t.Fatal("k2, refused by the fence, was loaded")
	}
}

// TestResignHandsOverAtOnce: Resign deletes the election key, so a waiting
// candidate leads without waiting for the lease; WatchLeader reports each
// leader.
func TestResignHandsOverAtOnce(t *testing.T) {
	cli := etcdClient(t)
	ctx := testCtx(t)
	const cluster = "resign-test"
	wctx, cancel := context.WithCancel(ctx)
	seen := make(chan string, 16)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		WatchLeader(wctx, cli, cluster, func(addr string) { seen <- addr })
	}()
	defer func() { cancel(); <-watched }()
	waitFor := func(want string) {
		t.Helper()
		for {
			select {
			case got := <-seen:
				if got == want {
					return
				}
			case <-ctx.Done():
				t.Fatalf("WatchLeader never reported %q", want)
			}
		}
	}
	waitFor("")
	e1, _ := NewElector(cli, cluster, 5*time.Second)
	e2, _ := NewElector(cli, cluster, 5*time.Second)
	t1, err := e1.Campaign(ctx, "a:1")
	if err != nil {
		t.Fatal(err)
	}
	waitFor("a:1")
	won := make(chan *Term, 1)
	go func() {
		tm, err := e2.Campaign(ctx, "b:2")
		if err != nil {
			t.Error(err)
		}
		won <- tm
	}()
	start := time.Now()
	if err := t1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	t2 := <-won
	if t2 == nil {
		t.FailNow()
	}
	defer t2.Resign(context.Background())
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("takeover after Resign took %v, want well under the 5 s lease", d)
	}
	waitFor("b:2")
	if err := t1.Check(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("resigned term Check: %v", err)
	}
}

func TestCheckClusterID(t *testing.T) {
	for _, tt := range []struct {
		id string
		ok bool
	}{{"mooncake_cluster", true}, {"a.b-C_9", true}, {"", false}, {"a/b", false}, {string(make([]byte, 129)), false}} {
		if err := CheckClusterID(tt.id); (err == nil) != tt.ok {
			t.Errorf("CheckClusterID(%q) = %v", tt.id, err)
		}
	}
}
