package topology_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/core/transfer/topology"
)

// twoSocket is a fake matrix: two HCAs per socket, a GPU preferring one
// HCA, and a location whose preferred list is empty.
var twoSocket = map[string][2][]string{
	"cpu:0":  {{"mlx5_0", "mlx5_1"}, {"mlx5_2", "mlx5_3"}},
	"cpu:1":  {{"mlx5_2", "mlx5_3"}, {"mlx5_0", "mlx5_1"}},
	"cuda:0": {{"mlx5_1"}, {"mlx5_0", "mlx5_2", "mlx5_3"}},
	"cuda:1": {{}, {"mlx5_3", "mlx5_2"}},
}

func seeded(rr bool) *topology.Selector {
	return topology.NewSelector(twoSocket, topology.SelectorOptions{RoundRobin: rr, Rand: rand.NewPCG(1, 2)})
}

// TestPickFirstAttempt: retry 0 picks only preferred devices (other ones
// when there are none), random or round-robin.
func TestPickFirstAttempt(t *testing.T) {
	for _, tc := range []struct {
		loc  string
		want []string // the set retry 0 may return
	}{
		{"cpu:0", []string{"mlx5_0", "mlx5_1"}},
		{"cpu:1", []string{"mlx5_2", "mlx5_3"}},
		{"cuda:0", []string{"mlx5_1"}},
		{"cuda:1", []string{"mlx5_3", "mlx5_2"}}, // no preferred: from other
	} {
		for _, rr := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/rr=%t", tc.loc, rr), func(t *testing.T) {
				s := seeded(rr)
				seen := map[string]int{}
				for i := 0; i < 200; i++ {
					d, err := s.Pick(tc.loc, 0)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Contains(tc.want, d) {
						t.Fatalf("Pick(%q, 0) = %q, want one of %v", tc.loc, d, tc.want)
					}
					seen[d]++
				}
				if len(seen) != len(tc.want) {
					t.Errorf("200 picks used %v, want all of %v", seen, tc.want)
				}
			})
		}
	}
}

// TestPickUniform: random first attempts spread evenly over the preferred
// list (seeded; simple bounds, 3σ is about 1%).
func TestPickUniform(t *testing.T) {
	m := map[string][2][]string{"cpu:0": {{"a", "b", "c", "d"}, {"e"}}}
	s := topology.NewSelector(m, topology.SelectorOptions{Rand: rand.NewPCG(42, 7)})
	const n = 40000
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		d, err := s.Pick("cpu:0", 0)
		if err != nil {
			t.Fatal(err)
		}
		counts[d]++
	}
	if counts["e"] != 0 {
		t.Errorf("other device picked %d times on first attempts", counts["e"])
	}
	for _, d := range []string{"a", "b", "c", "d"} {
		if c := counts[d]; c < n/4*95/100 || c > n/4*105/100 {
			t.Errorf("%s picked %d of %d times, want %d ± 5%% (%v)", d, c, n, n/4, counts)
		}
	}
	// The same seed gives the same sequence.
	a := topology.NewSelector(m, topology.SelectorOptions{Rand: rand.NewPCG(3, 3)})
	b := topology.NewSelector(m, topology.SelectorOptions{Rand: rand.NewPCG(3, 3)})
	for i := 0; i < 100; i++ {
		x, _ := a.Pick("cpu:0", 0)
		y, _ := b.Pick("cpu:0", 0)
		if x != y {
			t.Fatalf("pick %d: %q != %q with the same seed", i, x, y)
		}
	}
}

// TestPickRoundRobin: round-robin cycles the preferred list in order, one
// counter per location.
func TestPickRoundRobin(t *testing.T) {
	s := seeded(true)
	var got0, got1, gotGPU []string
	for i := 0; i < 5; i++ {
		d0, _ := s.Pick("cpu:0", 0)
		d1, _ := s.Pick("cpu:1", 0)
		dg, _ := s.Pick("cuda:1", 0)
		got0, got1, gotGPU = append(got0, d0), append(got1, d1), append(gotGPU, dg)
	}
	for _, tc := range []struct {
		name      string
		got, want []string
	}{
		{"cpu:0", got0, []string{"mlx5_0", "mlx5_1", "mlx5_0", "mlx5_1", "mlx5_0"}},
		{"cpu:1", got1, []string{"mlx5_2", "mlx5_3", "mlx5_2", "mlx5_3", "mlx5_2"}},
		{"cuda:1 (other list)", gotGPU, []string{"mlx5_3", "mlx5_2", "mlx5_3", "mlx5_2", "mlx5_3"}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// Retries do not advance the counter.
	s = seeded(true)
	s.Pick("cpu:0", 0)
	s.Pick("cpu:0", 3)
	if d, _ := s.Pick("cpu:0", 0); d != "mlx5_1" {
		t.Errorf("after a retry, round-robin gave %q, want mlx5_1", d)
	}
}

// TestPickRetryWalk: retry k picks index (k-1) mod (|preferred|+|other|)
// of preferred then other, whatever the first-attempt mode.
func TestPickRetryWalk(t *testing.T) {
	for _, tc := range []struct {
		loc  string
		want []string // retries 1, 2, ...
	}{
		{"cpu:0", []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_0", "mlx5_1"}},
		{"cpu:1", []string{"mlx5_2", "mlx5_3", "mlx5_0", "mlx5_1", "mlx5_2"}},
		{"cuda:0", []string{"mlx5_1", "mlx5_0", "mlx5_2", "mlx5_3", "mlx5_1"}},
		{"cuda:1", []string{"mlx5_3", "mlx5_2", "mlx5_3"}},
		// Missing location: the wildcard entry (every device, first
		// appearance in location-name order), all preferred.
		{"cpu:7", []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_0"}},
		{"*", []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}},
	} {
		for _, rr := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/rr=%t", tc.loc, rr), func(t *testing.T) {
				s := seeded(rr)
				for k, want := range tc.want {
					if _, err := s.Pick(tc.loc, 0); err != nil { // interleaved first attempts change nothing
						t.Fatal(err)
					}
					got, err := s.Pick(tc.loc, k+1)
					if err != nil || got != want {
						t.Errorf("Pick(%q, %d) = %q, %v; want %q", tc.loc, k+1, got, err, want)
					}
				}
			})
		}
	}
}

// TestPickFallback: a location missing from the matrix, or whose entry
// lists no device, uses the wildcard entry; an explicit "*" entry is kept;
// no device at all is ErrNoDevice.
func TestPickFallback(t *testing.T) {
	m := map[string][2][]string{
		"cpu:0": {{"b"}, {"a"}},
		"cpu:1": {{}, {}},
	}
	s := topology.NewSelector(m, topology.SelectorOptions{RoundRobin: true})
	for _, loc := range []string{"cpu:1", "cuda:0", "", "*"} {
		var got []string
		for i := 0; i < 4; i++ {
			d, err := s.Pick(loc, 0)
			if err != nil {
				t.Fatalf("Pick(%q) = %v", loc, err)
			}
			got = append(got, d)
		}
		// The wildcard entry's counter is shared by every location that
		// falls back to it; four picks leave it where it started.
		if want := []string{"b", "a", "b", "a"}; !reflect.DeepEqual(got, want) {
			t.Errorf("Pick(%q) round-robin = %v, want %v", loc, got, want)
		}
	}
	if got := s.Devices(); !reflect.DeepEqual(got, []string{"b", "a"}) {
		t.Errorf("Devices = %v, want [b a]", got)
	}

	explicit := topology.NewSelector(map[string][2][]string{"*": {{"z"}, {}}, "cpu:0": {{"a"}, {}}}, topology.SelectorOptions{})
	if d, err := explicit.Pick("cpu:9", 1); err != nil || d != "z" {
		t.Errorf("explicit wildcard: Pick = %q, %v; want z", d, err)
	}

	for name, m := range map[string]map[string][2][]string{
		"nil":          nil,
		"empty":        {},
		"empty lists":  {"cpu:0": {{}, {}}, "*": {nil, nil}},
		"no such node": {"cpu:0": {nil, {}}},
	} {
		s := topology.NewSelector(m, topology.SelectorOptions{})
		for _, retry := range []int{0, 1} {
			if d, err := s.Pick("cpu:0", retry); !errors.Is(err, topology.ErrNoDevice) {
				t.Errorf("%s: Pick = %q, %v; want ErrNoDevice", name, d, err)
			}
			if d, err := s.PickRemote(m, "cpu:0", retry, "a", true); !errors.Is(err, topology.ErrNoDevice) {
				t.Errorf("%s: PickRemote = %q, %v; want ErrNoDevice", name, d, err)
			}
		}
		if len(s.Devices()) != 0 {
			t.Errorf("%s: Devices = %v", name, s.Devices())
		}
	}

	// A negative retry is a first attempt.
	if d, err := seeded(true).Pick("cpu:0", -3); err != nil || d != "mlx5_0" {
		t.Errorf("Pick(retry -3) = %q, %v; want mlx5_0", d, err)
	}
}

// TestPickRemote: the peer's matrix, the target buffer's location, the
// same rule; destination affinity returns the local device's name when
// the peer's entry lists it.
func TestPickRemote(t *testing.T) {
	peer := map[string][2][]string{
		"cpu:0": {{"mlx5_0"}, {"mlx5_1"}},
		"cpu:1": {{"mlx5_1"}, {"mlx5_0"}},
	}
	s := topology.NewSelector(map[string][2][]string{"cpu:0": {{"x"}, {}}}, topology.SelectorOptions{Rand: rand.NewPCG(5, 5)})
	for _, tc := range []struct {
		name     string
		loc      string
		retry    int
		local    string
		affinity bool
		want     string
	}{
		{"preferred", "cpu:1", 0, "mlx5_0", false, "mlx5_1"},
		{"retry walks preferred then other", "cpu:1", 2, "", false, "mlx5_0"},
		{"retry wraps", "cpu:1", 3, "", false, "mlx5_1"},
		{"affinity to an other-list device", "cpu:1", 0, "mlx5_0", true, "mlx5_0"},
		{"affinity holds on retries", "cpu:1", 1, "mlx5_0", true, "mlx5_0"},
		{"affinity, device not in entry", "cpu:1", 0, "mlx5_9", true, "mlx5_1"},
		{"affinity, no local device", "cpu:0", 0, "", true, "mlx5_0"},
		{"missing location: wildcard", "cuda:3", 2, "", false, "mlx5_1"},
		{"missing location: affinity in wildcard", "cuda:3", 0, "mlx5_1", true, "mlx5_1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, m := range []map[string][2][]string{peer, topology.Resolve(peer)} {
				got, err := s.PickRemote(m, tc.loc, tc.retry, tc.local, tc.affinity)
				if err != nil || got != tc.want {
					t.Errorf("PickRemote(%q, %d, %q, %t) = %q, %v; want %q", tc.loc, tc.retry, tc.local, tc.affinity, got, err, tc.want)
				}
			}
		})
	}

	// Round-robin over the peer's preferred list, independent of Pick's
	// counters.
	rr := topology.NewSelector(map[string][2][]string{"cpu:0": {{"x", "y"}, {}}}, topology.SelectorOptions{RoundRobin: true})
	p := map[string][2][]string{"cpu:0": {{"p", "q", "r"}, {}}}
	var got []string
	for i := 0; i < 4; i++ {
		rr.Pick("cpu:0", 0)
		d, _ := rr.PickRemote(p, "cpu:0", 0, "", false)
		got = append(got, d)
	}
	if want := []string{"p", "q", "r", "p"}; !reflect.DeepEqual(got, want) {
		t.Errorf("remote round-robin = %v, want %v", got, want)
	}
}

func TestResolve(t *testing.T) {
	in := map[string][2][]string{
		"cuda:0": {{"c"}, {"a"}},
		"cpu:0":  {{"a"}, {"b", "c"}},
	}
	out := topology.Resolve(in)
	if _, ok := in["*"]; ok {
		t.Error("Resolve modified its input")
	}
	want := [2][]string{{"a", "b", "c"}, {}}
	if !reflect.DeepEqual(out["*"], want) {
		t.Errorf(`Resolve()["*"] = %v, want %v`, out["*"], want)
	}
	if len(out) != 3 || !reflect.DeepEqual(out["cpu:0"], in["cpu:0"]) {
		t.Errorf("Resolve = %v", out)
	}
	if out := topology.Resolve(map[string][2][]string{"cpu:0": {{}, {}}}); len(out) != 1 {
		t.Errorf("Resolve without devices added %v", out)
	}
}

// TestSelectorConcurrent is for -race: one seeded source shared by many
// goroutines, and shared round-robin counters, which split first attempts
// evenly.
func TestSelectorConcurrent(t *testing.T) {
	for _, rr := range []bool{false, true} {
		s := seeded(rr)
		var wg sync.WaitGroup
		counts := make([]map[string]int, 8) // first attempts per goroutine
		for g := range counts {
			counts[g] = map[string]int{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 600; i++ {
					d, err := s.Pick("cpu:0", i%3)
					if err != nil {
						t.Error(err)
						return
					}
					if i%3 == 0 {
						counts[g][d]++
					}
					if _, err := s.PickRemote(twoSocket, "cpu:1", i%2, d, i%4 == 0); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		total := map[string]int{}
		for _, c := range counts {
			for d, n := range c {
				total[d] += n
			}
		}
		if len(total) != 2 || total["mlx5_0"]+total["mlx5_1"] != 1600 {
			t.Errorf("rr=%t: first attempts %v", rr, total)
		}
		if rr && total["mlx5_0"] != 800 {
			t.Errorf("round-robin split %v, want 800 each", total)
		}
	}
}

// A buffer on socket 1 prefers the HCAs of socket 1; a failing slice is
// retried on each device in turn.
func ExampleSelector() {
	m := map[string][2][]string{
		"cpu:0": {{"mlx5_0"}, {"mlx5_1"}},
		"cpu:1": {{"mlx5_1"}, {"mlx5_0"}},
	}
	s := topology.NewSelector(m, topology.SelectorOptions{RoundRobin: true})
	var walk []string
	for retry := 0; retry < 4; retry++ {
		d, _ := s.Pick("cpu:1", retry)
		walk = append(walk, d)
	}
	fmt.Println(walk)
	d, _ := s.PickRemote(m, "cpu:0", 0, "mlx5_1", true) // rail affinity
	fmt.Println(d)
	// Output:
	// [mlx5_1 mlx5_1 mlx5_0 mlx5_1]
	// mlx5_1
}

// BenchmarkPick is the per-slice cost; it allocates nothing.
func BenchmarkPick(b *testing.B) {
	peer := topology.Resolve(twoSocket)
	for _, bc := range []struct {
		name string
		opts topology.SelectorOptions
	}{
		{"random", topology.SelectorOptions{}},
		{"seeded", topology.SelectorOptions{Rand: rand.NewPCG(1, 1)}},
		{"roundrobin", topology.SelectorOptions{RoundRobin: true}},
	} {
		s := topology.NewSelector(twoSocket, bc.opts)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					d, _ := s.Pick("cpu:1", 0)
					s.PickRemote(peer, "cuda:7", 0, d, false)
				}
			})
		})
	}
}
