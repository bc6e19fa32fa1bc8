package master

import (
	"fmt"
	"slices"
	"testing"

	"github.com/mooncake-go/mooncake/core/store"
)

// kindSeg is testSeg with a kind.
func kindSeg(id string, size uint64, kind store.SegmentKind) Segment {
	s := testSeg(id, size)
	s.Kind = kind
	return s
}

// TestStandaloneFirst: with one embedded and one standalone segment, every
// strategy that honours kinds puts single-replica values on the standalone
// segment until it is full, then on the embedded one, and evicts only when
// both are full (the freed space is the standalone segment's oldest
// objects, so the put lands there again). local_first with a writer host
// keeps its host order instead.
func TestStandaloneFirst(t *testing.T) {
	const (
		segSize = 4096
		size    = 512 // 8 per segment
		perSeg  = segSize / size
	)
	for _, tc := range []struct {
		name     string
		strategy string
		cfg      ReplicaConfig
		first    string // where the first perSeg puts go
	}{
		{"random", StrategyRandom, ReplicaConfig{ReplicaNum: 1}, "std"},
		{"free_ratio_first", StrategyFreeRatioFirst, ReplicaConfig{ReplicaNum: 1}, "std"},
		{"local_first without a writer host", StrategyLocalFirst, ReplicaConfig{ReplicaNum: 1}, "std"},
		{"local_first on the standalone host", StrategyLocalFirst, ReplicaConfig{ReplicaNum: 1, HostID: "hostS"}, "std"},
		{"local_first on the embedded host keeps host order", StrategyLocalFirst, ReplicaConfig{ReplicaNum: 1, HostID: "hostE"}, "emb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newTestMaster(t, func(c *Config) { c.AllocationStrategy = tc.strategy })
			emb, std := kindSeg("emb", segSize, store.SegmentEmbedded), kindSeg("std", segSize, store.SegmentStandalone)
			emb.HostID, std.HostID = "hostE", "hostS"
			mustMount(t, m, "c1", emb, std)
			second := map[string]string{"std": "emb", "emb": "std"}[tc.first]
			for i := range 2 * perSeg {
				want := tc.first
				if i >= perSeg {
					want = second
				}
				rs := putPinned(t, m, fmt.Sprintf("k%d", i), size, tc.cfg)
				if len(rs) != 1 || rs[0].SegmentID != want {
					t.Fatalf("put %d landed on %+v, want %s", i, rs, want)
				}
			}
			if st := m.Stats(); st.EvictedObjects != 0 || st.Used != 2*segSize {
				t.Fatalf("after filling both segments: %+v, want no eviction", st)
			}
			// Both full: the put evicts the least recently used (k0, on
			// the first segment) and lands in its place.
			rs := putPinned(t, m, "next", size, tc.cfg)
			if st := m.Stats(); st.EvictedObjects == 0 || present(m, "k0") || rs[0].SegmentID != tc.first {
				t.Fatalf("put into a full pool landed on %+v (stats %+v), want an eviction and %s", rs, st, tc.first)
			}
		})
	}
}

// TestStandaloneFirstReplicas: a second replica goes to an embedded segment
// only when no other standalone segment can take it.
func TestStandaloneFirstReplicas(t *testing.T) {
	for _, strategy := range []string{StrategyRandom, StrategyFreeRatioFirst} {
		t.Run(strategy, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				segs []Segment
				want []string // replica segments, sorted
			}{
				{"one of each", []Segment{kindSeg("emb", 4096, store.SegmentEmbedded), kindSeg("std", 4096, store.SegmentStandalone)}, []string{"emb", "std"}},
				{"two standalone", []Segment{kindSeg("emb", 4096, store.SegmentEmbedded), kindSeg("std1", 4096, store.SegmentStandalone),
					kindSeg("std2", 4096, store.SegmentStandalone)}, []string{"std1", "std2"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					m, _ := newTestMaster(t, func(c *Config) { c.AllocationStrategy = strategy })
					mustMount(t, m, "c1", tc.segs...)
					for i := range 4 {
						rs := putPinned(t, m, fmt.Sprintf("k%d", i), 64, ReplicaConfig{ReplicaNum: 2})
						var got []string
						for _, r := range rs {
							got = append(got, r.SegmentID)
						}
						if rs[0].SegmentID == "emb" {
							t.Fatalf("put %d: first replica on the embedded segment: %v", i, got)
						}
						slices.Sort(got)
						if !slices.Equal(got, tc.want) {
							t.Fatalf("put %d: replicas on %v, want %v", i, got, tc.want)
						}
					}
				})
			}
		})
	}
}

// TestPreferredBeatsKind: explicitly preferred segments are tried first
// whatever their kind. local_first takes the writer host from
// PreferredSegment and then keeps its host order (segments here are on
// hosts "node-<id>").
func TestPreferredBeatsKind(t *testing.T) {
	for _, tc := range []struct {
		name            string
		cfg             ReplicaConfig
		want, wantLocal []string // replica segments in order; wantLocal for local_first
	}{
		{"PreferredSegment", ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-emb"}, []string{"emb"}, []string{"emb"}},
		{"PreferredSegments", ReplicaConfig{ReplicaNum: 1, PreferredSegments: []string{"node-emb"}}, []string{"emb"}, []string{"emb"}},
		{"preferred first, then standalone", ReplicaConfig{ReplicaNum: 2, PreferredSegment: "node-emb"}, []string{"emb", "std"}, []string{"emb", "emb2"}},
		{"unknown preferred", ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-zz"}, []string{"std"}, []string{"emb"}}, // host order wraps to node-emb
	} {
		for _, strategy := range []string{StrategyRandom, StrategyFreeRatioFirst, StrategyLocalFirst} {
			t.Run(tc.name+"/"+strategy, func(t *testing.T) {
				m, _ := newTestMaster(t, func(c *Config) { c.AllocationStrategy = strategy })
				mustMount(t, m, "c1", kindSeg("emb", 4096, store.SegmentEmbedded), kindSeg("emb2", 4096, store.SegmentEmbedded),
					kindSeg("std", 4096, store.SegmentStandalone))
				want := tc.want
				if strategy == StrategyLocalFirst {
					want = tc.wantLocal
				}
				for i := range 4 {
					var got []string
					for _, r := range putPinned(t, m, fmt.Sprintf("k%d", i), 64, tc.cfg) {
						got = append(got, r.SegmentID)
					}
					if !slices.Equal(got, want) {
						t.Fatalf("put %d: replicas on %v, want %v", i, got, want)
					}
				}
			})
		}
	}
}

// TestStripeStandaloneFirst: a value larger than every segment takes its
// pieces from standalone segments first, even where an embedded segment
// sorts first and is as free, and from embedded ones only to complete the
// stripe.
func TestStripeStandaloneFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		segs []Segment
		want []string // pieces' segments in value order
	}{
		{"standalone suffices", []Segment{kindSeg("a-emb", 1024, store.SegmentEmbedded), kindSeg("b-std", 1024, store.SegmentStandalone),
			kindSeg("c-std", 1024, store.SegmentStandalone)}, []string{"b-std", "c-std"}},
		{"embedded completes it", []Segment{kindSeg("a-emb", 1024, store.SegmentEmbedded), kindSeg("b-std", 1024, store.SegmentStandalone)},
			[]string{"b-std", "a-emb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newTestMaster(t, nil)
			mustMount(t, m, "c1", tc.segs...)
			rs := mustPut(t, m, "c1", "big", 1500, 1)
			var got []string
			for _, p := range rs[0].Pieces() {
				got = append(got, p.SegmentID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("pieces on %v, want %v", got, tc.want)
			}
		})
	}
}

// TestOneKindPoolUnchanged: a pool of standalone segments only places
// exactly as one of embedded segments only (and as before kinds existed):
// the standalone-first pass draws nothing when a kind is absent.
func TestOneKindPoolUnchanged(t *testing.T) {
	for _, strategy := range []string{StrategyRandom, StrategyFreeRatioFirst, StrategyLocalFirst} {
		t.Run(strategy, func(t *testing.T) {
			run := func(kind store.SegmentKind) []string {
				m, _ := newTestMaster(t, func(c *Config) { c.AllocationStrategy = strategy })
				for i := range 5 {
					mustMount(t, m, "c1", kindSeg(fmt.Sprintf("s%d", i), 4096, kind))
				}
				var out []string
				for k := range 60 {
					cfg := ReplicaConfig{ReplicaNum: 1 + k%3}
					if k%4 == 0 {
						cfg.HostID = "node-s2"
					}
					for _, r := range putPinned(t, m, fmt.Sprintf("k%d", k), uint64(64+k*40), cfg) {
						out = append(out, fmt.Sprintf("%s@%d", r.SegmentID, r.Addr))
					}
				}
				return out
			}
			if a, b := run(store.SegmentEmbedded), run(store.SegmentStandalone); !slices.Equal(a, b) {
				t.Fatalf("placement differs by kind:\nembedded   %v\nstandalone %v", a, b)
			}
		})
	}
}

// TestKindFollowsMounts: unmounting the standalone segment sends puts to
// the embedded one; mounting it again brings them back.
func TestKindFollowsMounts(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	std := kindSeg("std", 4096, store.SegmentStandalone)
	mustMount(t, m, "c1", kindSeg("emb", 4096, store.SegmentEmbedded), std)
	for i, tc := range []struct {
		mount, unmount bool
		want           string
	}{
		{want: "std"},
		{unmount: true, want: "emb"},
		{mount: true, want: "std"},
	} {
		if tc.unmount {
			if err := m.UnmountSegment("std", "c1"); err != nil {
				t.Fatal(err)
			}
		}
		if tc.mount {
			mustMount(t, m, "c1", std)
		}
		if rs := putPinned(t, m, fmt.Sprintf("k%d", i), 64, ReplicaConfig{ReplicaNum: 1}); rs[0].SegmentID != tc.want {
			t.Fatalf("step %d: put on %s, want %s", i, rs[0].SegmentID, tc.want)
		}
	}
}

func TestSegmentKindChecks(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	checkErr(t, m.MountSegment(kindSeg("bad", 4096, 7), "c1"), store.ErrInvalidParams)
	std := kindSeg("std", 4096, store.SegmentStandalone)
	mustMount(t, m, "c1", std)
	checkErr(t, m.ReMountSegment([]Segment{std}, "c1"), nil)
	checkErr(t, m.ReMountSegment([]Segment{testSeg("std", 4096)}, "c1"), store.ErrSegmentExists)
	checkErr(t, m.ReMountSegment([]Segment{kindSeg("bad", 4096, 2)}, "c1"), store.ErrInvalidParams)
	info, err := m.QuerySegment("std")
	if err != nil || info.Kind != store.SegmentStandalone {
		t.Fatalf("QuerySegment = %+v, %v", info, err)
	}
}

// TestReplicationKeepsKind: a segment's kind survives a snapshot (Dump,
// Restore) and a replay of the observed mount events, and the restored
// masters still place standalone first.
func TestReplicationKeepsKind(t *testing.T) {
	rec := &recorder{}
	clk := &replClock{}
	leader := newReplMaster(t, clk, rec, 1)
	for _, s := range []Segment{kindSeg("emb", 4096, store.SegmentEmbedded), kindSeg("std", 4096, store.SegmentStandalone)} {
		mustMount(t, leader, "node", s)
	}
	putPinned(t, leader, "k", 64, ReplicaConfig{ReplicaNum: 1})
	snap := newReplMaster(t, clk, nil, 2)
	if err := snap.Restore(leader.Dump()); err != nil {
		t.Fatal(err)
	}
	log := newReplMaster(t, clk, nil, 3)
	for _, e := range rec.events {
		if err := replay(log, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		m    *Master
	}{{"snapshot", snap}, {"log", log}} {
		t.Run(tc.name, func(t *testing.T) {
			kinds := map[string]store.SegmentKind{}
			for _, s := range tc.m.ListSegments() {
				kinds[s.ID] = s.Kind
			}
			if kinds["emb"] != store.SegmentEmbedded || kinds["std"] != store.SegmentStandalone || len(kinds) != 2 {
				t.Fatalf("restored kinds %v", kinds)
			}
			for i := range 4 {
				if rs := putPinned(t, tc.m, fmt.Sprintf("after%d", i), 64, ReplicaConfig{ReplicaNum: 1}); rs[0].SegmentID != "std" {
					t.Fatalf("put %d on the restored master landed on %s", i, rs[0].SegmentID)
				}
			}
		})
	}
}

func TestSegmentKindText(t *testing.T) {
	for _, tc := range []struct {
		text string
		kind store.SegmentKind
		ok   bool
	}{
		{"embedded", store.SegmentEmbedded, true},
		{"", store.SegmentEmbedded, true},
		{"standalone", store.SegmentStandalone, true},
		{"node", 0, false},
	} {
		k, err := store.ParseSegmentKind(tc.text)
		if (err == nil) != tc.ok || k != tc.kind {
			t.Errorf("ParseSegmentKind(%q) = %v, %v", tc.text, k, err)
		}
		if tc.ok && tc.text != "" && k.String() != tc.text {
			t.Errorf("%v.String() = %q", k, k.String())
		}
	}
	if _, err := store.SegmentKind(5).MarshalText(); store.CodeOf(err) != store.InvalidParams {
		t.Errorf("MarshalText of kind 5: %v", err)
	}
	if s := store.SegmentKind(5).String(); s != "SegmentKind(5)" {
		t.Errorf("String of kind 5: %q", s)
	}
}
