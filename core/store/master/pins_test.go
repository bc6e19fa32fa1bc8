package master

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
)

// TestEvictionOrderWithPins fills one 640-byte segment with ten 64-byte
// objects k0 (least recently used) .. k9, some pinned, and checks which
// keys a new put evicts.
func TestEvictionOrderWithPins(t *testing.T) {
	S := ReplicaConfig{ReplicaNum: 1, WithSoftPin: true}
	H := ReplicaConfig{ReplicaNum: 1, WithHardPin: true}
	P := ReplicaConfig{ReplicaNum: 1}
	for _, tc := range []struct {
		name    string
		noSoft  bool                      // Config.NoEvictSoftPinned
		cfgs    []ReplicaConfig           // k0 .. k9
		before  func(*Master, *fakeClock) // after the fill
		put     uint64                    // size of the new put
		evicted []string
		err     *store.Error
	}{
		{
			name: "soft-pinned objects outlive older plain ones",
			cfgs: []ReplicaConfig{S, S, P, P, P, P, P, P, P, P},
			put:  128, evicted: []string{"k2", "k3"},
		},
		{
			name: "hard-pinned objects are skipped",
			cfgs: []ReplicaConfig{H, P, H, P, P, P, P, P, P, P},
			put:  64, evicted: []string{"k1"},
		},
		{
			name: "second pass takes soft-pinned when nothing else is left",
			cfgs: []ReplicaConfig{S, H, H, H, H, H, H, H, H, S},
			put:  64, evicted: []string{"k0"},
		},
		{
			name: "first pass, then second pass for the rest",
			cfgs: []ReplicaConfig{S, P, H, H, H, H, H, H, H, H},
			put:  128, evicted: []string{"k0", "k1"},
		},
		{
			name:   "soft-pinned kept when not allowed",
			noSoft: true,
			cfgs:   []ReplicaConfig{S, H, H, H, H, H, H, H, H, S},
			put:    64, err: store.ErrNoAvailableHandle,
		},
		{
			name: "all hard-pinned: nothing to evict",
			cfgs: []ReplicaConfig{H, H, H, H, H, H, H, H, H, H},
			put:  64, err: store.ErrNoAvailableHandle,
		},
		{
			name: "leased soft-pinned not taken in the second pass",
			cfgs: []ReplicaConfig{S, S, H, H, H, H, H, H, H, H},
			before: func(m *Master, _ *fakeClock) {
				m.GetReplicaList("k0")
			},
			put: 64, evicted: []string{"k1"},
		},
		{
			name: "an expired soft pin is an ordinary object",
			cfgs: []ReplicaConfig{S, P, P, P, P, P, P, P, P, P},
			before: func(m *Master, clk *fakeClock) {
				clk.Advance(m.Config().DefaultSoftPinTTL)
			},
			put: 64, evicted: []string{"k0"},
		},
		{
			name: "a read renews the soft pin (0.3.x)",
			cfgs: []ReplicaConfig{S, P, P, P, P, P, P, P, P, P},
			before: func(m *Master, clk *fakeClock) {
				clk.Advance(m.Config().DefaultSoftPinTTL - time.Second)
				m.ExistKey("k0") // renews the pin; the lease ends long before it
				for _, k := range []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"} {
					m.ExistKey(k) // k0 is least recently used again
				}
				clk.Advance(time.Minute)
			},
			put: 64, evicted: []string{"k1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, clk := newTestMaster(t, func(c *Config) {
				c.NoEvictSoftPinned = tc.noSoft
				c.EvictionRatio = 0.01 // evict only what the put needs
			})
			mustMount(t, m, "c1", testSeg("a", 640))
			var all []string
			for i, cfg := range tc.cfgs {
				k := fmt.Sprintf("k%d", i)
				putPinned(t, m, k, 64, cfg)
				all = append(all, k)
			}
			if tc.before != nil {
				tc.before(m, clk)
			}
			_, err := m.PutStart("c1", "new", tc.put, P)
			checkErr(t, err, tc.err)
			var gone []string
			for _, k := range all {
				if !present(m, k) {
					gone = append(gone, k)
				}
			}
			if !slices.Equal(gone, tc.evicted) {
				t.Fatalf("evicted %v, want %v", gone, tc.evicted)
			}
		})
	}
}

// TestTickRespectsPins: watermark eviction skips hard pins and takes soft
// pins last.
func TestTickRespectsPins(t *testing.T) {
	m, _ := newTestMaster(t, func(c *Config) {
		c.EvictionHighWatermark = 0.5
		c.EvictionRatio = 0.1
	})
	mustMount(t, m, "c1", testSeg("a", 1000))
	putPinned(t, m, "hard", 300, ReplicaConfig{ReplicaNum: 1, WithHardPin: true})
	putPinned(t, m, "soft", 300, ReplicaConfig{ReplicaNum: 1, WithSoftPin: true})
	putPinned(t, m, "plain", 300, ReplicaConfig{ReplicaNum: 1})
	// Usage 0.9 > 0.5: free max(0.1, 0.9-0.5+0.1) = 500 bytes.
	if n := m.Tick(); n != 2 {
		t.Fatalf("Tick evicted %d, want 2 (plain, then soft)", n)
	}
	if got := keysOf(m); !slices.Equal(got, []string{"hard"}) {
		t.Fatalf("left %v, want [hard]", got)
	}
	for range 3 {
		if n := m.Tick(); n != 0 {
			t.Fatalf("Tick evicted a hard-pinned object")
		}
	}
}
