package rdma

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/topology"
)

// Path-selection glue, tested in both builds (rails.go has no build tag).

// host is a fake two-socket host with three opened devices; mlx5_9 is in
// the matrix but did not open.
var (
	hostDevices = []string{"mlx5_0", "mlx5_1", "mlx5_2"}
	hostMatrix  = map[string][2][]string{
		"cpu:0":  {{"mlx5_0"}, {"mlx5_1", "mlx5_2", "mlx5_9"}},
		"cpu:1":  {{"mlx5_1", "mlx5_2"}, {"mlx5_0"}},
		"cuda:0": {{"mlx5_9"}, {"mlx5_2"}},
	}
)

func hostRails(rr, affinity bool) *rails {
	return newRails(hostDevices, hostMatrix, topology.SelectorOptions{RoundRobin: rr, Rand: rand.NewPCG(9, 9)}, affinity)
}

// TestLocalDevice: (buffer location, attempt) -> device index, the
// function the data path calls per slice.
func TestLocalDevice(t *testing.T) {
	for _, tc := range []struct {
		loc  string
		want []int // attempts 0, 1, 2, ... with round-robin first attempts
	}{
		{"cpu:0", []int{0, 0, 1, 2, 0, 1}},     // preferred mlx5_0; walk mlx5_0, mlx5_1, mlx5_2 (mlx5_9 dropped)
		{"cpu:1", []int{1, 1, 2, 0, 1}},        // round-robin starts at mlx5_1; walk mlx5_1, mlx5_2, mlx5_0
		{"cuda:0", []int{2, 2, 2}},             // mlx5_9 dropped: only mlx5_2 left (from "other")
		{"cpu:5", []int{0, 0, 1, 2, 0}},        // no entry: wildcard, every device
		{"*", []int{0, 0, 1, 2}},               // unknown location
		{"", []int{0, 0, 1}},                   // empty location: wildcard too
		{"cuda:1", []int{0, 0, 1, 2, 0, 1, 2}}, // no entry
	} {
		t.Run(tc.loc, func(t *testing.T) {
			r := hostRails(true, false)
			var got []int
			for retry := range tc.want {
				i, err := r.localDevice(tc.loc, retry)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, i)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("localDevice(%q, 0..%d) = %v, want %v", tc.loc, len(tc.want)-1, got, tc.want)
			}
		})
	}
	// Round-robin first attempts of cpu:1 alternate its two preferred
	// devices; random ones stay within them and use both.
	rr := hostRails(true, false)
	var seq []int
	for i := 0; i < 4; i++ {
		d, _ := rr.localDevice("cpu:1", 0)
		seq = append(seq, d)
	}
	if !reflect.DeepEqual(seq, []int{1, 2, 1, 2}) {
		t.Errorf("round-robin cpu:1 = %v, want [1 2 1 2]", seq)
	}
	rnd := hostRails(false, false)
	seen := map[int]int{}
	for i := 0; i < 1000; i++ {
		d, _ := rnd.localDevice("cpu:1", 0)
		seen[d]++
	}
	if len(seen) != 2 || seen[1] < 400 || seen[2] < 400 {
		t.Errorf("random cpu:1 first attempts = %v, want devices 1 and 2 about evenly", seen)
	}
}

// TestChoose: both ends of a slice's path, with and without destination
// affinity, and the retry walk on both sides.
func TestChoose(t *testing.T) {
	peer, err := peerMatrix(map[string][2][]string{
		"cpu:0": {{"mlx5_0"}, {"mlx5_1"}},
		"cpu:1": {{"mlx5_1"}, {"mlx5_0"}},
		"gone":  {{"mlx5_7"}, {}}, // a device the peer does not list: dropped
	}, []string{"mlx5_0", "mlx5_1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		affinity  bool
		localLoc  string
		remoteLoc string
		want      []path // attempts 0, 1, ...
	}{
		{"numa local both sides", false, "cpu:0", "cpu:1", []path{{0, "mlx5_1"}, {0, "mlx5_1"}, {1, "mlx5_0"}, {2, "mlx5_1"}}},
		{"affinity follows the local device", true, "cpu:0", "cpu:1", []path{{0, "mlx5_0"}, {0, "mlx5_0"}, {1, "mlx5_1"}, {2, "mlx5_1"}}},
		{"unknown remote location", false, "cpu:1", "*", []path{{1, "mlx5_0"}, {1, "mlx5_0"}, {2, "mlx5_1"}, {0, "mlx5_0"}}},
		{"remote entry emptied", false, "cpu:0", "gone", []path{{0, "mlx5_0"}, {0, "mlx5_0"}, {1, "mlx5_1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := hostRails(true, tc.affinity)
			var got []path
			for retry := range tc.want {
				p, err := r.choose(tc.localLoc, peer, tc.remoteLoc, retry)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, p)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("choose = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := hostRails(false, false).choose("cpu:0", map[string][2][]string{}, "cpu:0", 0); !errors.Is(err, topology.ErrNoDevice) {
		t.Errorf("empty peer matrix: err = %v, want topology.ErrNoDevice", err)
	}
}

func TestPrepareMatrix(t *testing.T) {
	in := map[string][2][]string{
		"cpu:0": {{"a", "x", "a"}, {"b", "a", "y"}},
		"cpu:1": {{}, {"x"}},
	}
	got := prepareMatrix(in, []string{"a", "b"})
	want := map[string][2][]string{"cpu:0": {{"a"}, {"b"}}, "cpu:1": {{}, {}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("prepareMatrix = %v, want %v", got, want)
	}
	got["cpu:0"][0][0] = "changed"
	if in["cpu:0"][0][0] != "a" {
		t.Error("prepareMatrix shares lists with its input")
	}
	for name, m := range map[string]map[string][2][]string{
		"nil":            nil,
		"foreign device": {"cpu:0": {{"x"}, {}}},
		"empty lists":    {"cpu:0": {{}, {}}},
	} {
		want := map[string][2][]string{"*": {{"a", "b"}, {}}}
		if got := prepareMatrix(m, []string{"a", "b"}); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: prepareMatrix = %v, want every device for every location %v", name, got, want)
		}
	}
	if _, err := peerMatrix(in, nil); !errors.Is(err, ErrHandshake) {
		t.Errorf("peerMatrix without devices: %v, want ErrHandshake", err)
	}
	pm, err := peerMatrix(in, []string{"b", "a"})
	if err != nil || !reflect.DeepEqual(pm["*"], [2][]string{{"a", "b"}, {}}) {
		t.Errorf(`peerMatrix["*"] = %v, %v`, pm["*"], err)
	}
}

// TestDiscoverMatrix: this host has no HCA (or sysfs is missing), so the
// discovered matrix names none of the opened devices and every device
// serves every location.
func TestDiscoverMatrix(t *testing.T) {
	names := []string{"fake_0", "fake_1"}
	for _, root := range []string{"", t.TempDir() + "/missing"} {
		r := newRails(names, discoverMatrix(root, names), topology.SelectorOptions{}, false)
		if want := map[string][2][]string{"*": {names, {}}}; !reflect.DeepEqual(r.matrix, want) {
			t.Errorf("sysfs %q: matrix %v, want %v", root, r.matrix, want)
		}
	}
}

func TestGroupSpans(t *testing.T) {
	spans := splitSpans(10, 2) // 5 spans
	paths := []path{{0, "a"}, {1, "b"}}
	i := 0
	groups, err := groupSpans(spans, func() (path, error) { p := paths[i%2]; i++; return p, nil })
	want := map[path][]span{{0, "a"}: {{0, 2}, {4, 2}, {8, 2}}, {1, "b"}: {{2, 2}, {6, 2}}}
	if err != nil || !reflect.DeepEqual(groups, want) {
		t.Errorf("groupSpans = %v, %v; want %v", groups, err, want)
	}
	boom := errors.New("boom")
	if _, err := groupSpans(spans, func() (path, error) { return path{}, boom }); err != boom {
		t.Errorf("error not propagated: %v", err)
	}
}

// fakeFabric runs groups like the data path does (runGroups), failing
// every slice on a path whose local or remote device is down, and records
// which path each slice took on each attempt.
type fakeFabric struct {
	down map[string]bool // device names, "local:" or "remote:" prefixed
	err  error           // the error a down path returns
	mu   sync.Mutex
	log  []string // "attempt path span" lines, sorted per attempt
}

func (f *fakeFabric) run(ctx context.Context, r *rails, attempt *int) func(map[path][]span) ([]span, error) {
	return func(groups map[path][]span) ([]span, error) {
		var lines []string
		failed, err := runGroups(ctx, groups, func(k path, spans []span) error {
			f.mu.Lock()
			for _, s := range spans {
				lines = append(lines, fmt.Sprintf("%d %s>%s @%d", *attempt, r.names[k.local], k.remote, s.off))
			}
			f.mu.Unlock()
			if f.down["local:"+r.names[k.local]] || f.down["remote:"+k.remote] {
				return f.err
			}
			return nil
		})
		sort.Strings(lines)
		f.log = append(f.log, lines...)
		*attempt++
		return failed, err
	}
}

// TestTransferSpansRetryWalk: slices on a dead rail are resubmitted on the
// next path of the walk until one works or the retries are spent; fatal
// errors are not retried.
func TestTransferSpansRetryWalk(t *testing.T) {
	peer, _ := peerMatrix(map[string][2][]string{
		"cpu:0": {{"mlx5_0"}, {"mlx5_1", "mlx5_2"}},
		"cpu:1": {{"mlx5_1", "mlx5_2"}, {"mlx5_0"}},
	}, hostDevices)
	pathErr := errors.New("work completion: transport retry counter exceeded")
	for _, tc := range []struct {
		name         string
		down         []string
		err          error
		maxRetry     int
		wantAttempts int
		wantErr      error
		wantLog      []string
	}{
		{"all up", nil, pathErr, 9, 1, nil, []string{
			"0 mlx5_0>mlx5_0 @0", "0 mlx5_0>mlx5_0 @4", "0 mlx5_0>mlx5_0 @8",
		}},
		{"local rail 0 down: walk to mlx5_1", []string{"local:mlx5_0"}, pathErr, 9, 3, nil, []string{
			"0 mlx5_0>mlx5_0 @0", "0 mlx5_0>mlx5_0 @4", "0 mlx5_0>mlx5_0 @8",
			"1 mlx5_0>mlx5_0 @0", "1 mlx5_0>mlx5_0 @4", "1 mlx5_0>mlx5_0 @8", // retry 1 = walk index 0: still mlx5_0
			"2 mlx5_1>mlx5_1 @0", "2 mlx5_1>mlx5_1 @4", "2 mlx5_1>mlx5_1 @8",
		}},
		{"retries spent", []string{"local:mlx5_0", "local:mlx5_1", "local:mlx5_2"}, pathErr, 2, 3, pathErr, []string{
			"0 mlx5_0>mlx5_0 @0", "0 mlx5_0>mlx5_0 @4", "0 mlx5_0>mlx5_0 @8",
			"1 mlx5_0>mlx5_0 @0", "1 mlx5_0>mlx5_0 @4", "1 mlx5_0>mlx5_0 @8",
			"2 mlx5_1>mlx5_1 @0", "2 mlx5_1>mlx5_1 @4", "2 mlx5_1>mlx5_1 @8",
		}},
		{"no retries", []string{"remote:mlx5_0"}, pathErr, -1, 1, pathErr, []string{
			"0 mlx5_0>mlx5_0 @0", "0 mlx5_0>mlx5_0 @4", "0 mlx5_0>mlx5_0 @8",
		}},
		{"rejected is final", []string{"local:mlx5_0"}, transfer.ErrRejected, 9, 1, transfer.ErrRejected, []string{
			"0 mlx5_0>mlx5_0 @0", "0 mlx5_0>mlx5_0 @4", "0 mlx5_0>mlx5_0 @8",
		}},
		{"unreachable peer is final", []string{"local:mlx5_0"}, fmt.Errorf("%w: %w: dial", ErrHandshake, errUnreachable), 9, 1, errUnreachable, []string{
			"0 mlx5_0>mlx5_0 @0", "0 mlx5_0>mlx5_0 @4", "0 mlx5_0>mlx5_0 @8",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Local buffer on cpu:0, target buffer on cpu:0 of the peer;
			// round-robin so attempt 0 is deterministic.
			r := hostRails(true, false)
			f := &fakeFabric{down: map[string]bool{}, err: tc.err}
			for _, d := range tc.down {
				f.down[d] = true
			}
			attempt := 0
			ctx := context.Background()
			n, err := transferSpans(ctx, splitSpans(10, 4), tc.maxRetry,
				func(retry int) (path, error) { return r.choose("cpu:0", peer, "cpu:0", retry) }, f.run(ctx, r, &attempt))
			if n != tc.wantAttempts || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("transferSpans = %d attempts, %v; want %d, %v", n, err, tc.wantAttempts, tc.wantErr)
			}
			if !reflect.DeepEqual(f.log, tc.wantLog) {
				t.Errorf("paths taken:\n%q\nwant\n%q", f.log, tc.wantLog)
			}
		})
	}
}

// TestTransferSpansParallelPaths: random first attempts spread slices over
// the preferred devices; only the slices of the failed path are retried.
func TestTransferSpansParallelPaths(t *testing.T) {
	peer, _ := peerMatrix(map[string][2][]string{"cpu:1": {{"mlx5_1", "mlx5_2"}, {"mlx5_0"}}}, hostDevices)
	r := hostRails(false, true) // random, affinity: remote = local name
	f := &fakeFabric{down: map[string]bool{"local:mlx5_2": true}, err: errors.New("wc error")}
	attempt := 0
	ctx := context.Background()
	n, err := transferSpans(ctx, splitSpans(64, 1), 9,
		func(retry int) (path, error) { return r.choose("cpu:1", peer, "cpu:1", retry) }, f.run(ctx, r, &attempt))
	if err != nil || n != 2 {
		t.Fatalf("transferSpans = %d, %v; want 2 attempts, nil", n, err)
	}
	perAttempt := map[int]map[string]int{0: {}, 1: {}}
	for _, l := range f.log {
		var a int
		var p string
		var off int
		fmt.Sscanf(l, "%d %s @%d", &a, &p, &off)
		perAttempt[a][p]++
	}
	first := perAttempt[0]
	if first["mlx5_1>mlx5_1"]+first["mlx5_2>mlx5_2"] != 64 || first["mlx5_1>mlx5_1"] < 16 || first["mlx5_2>mlx5_2"] < 16 {
		t.Errorf("first attempt spread %v, want 64 slices over both cpu:1 rails", first)
	}
	// Retry 1 walks to index 0 of cpu:1's list: mlx5_1, and carries
	// exactly the slices that were on mlx5_2.
	if want := map[string]int{"mlx5_1>mlx5_1": first["mlx5_2>mlx5_2"]}; !reflect.DeepEqual(perAttempt[1], want) {
		t.Errorf("retry carried %v, want %v", perAttempt[1], want)
	}
}

func TestRetryable(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{live, errors.New("work completion: remote access error"), true},
		{live, fmt.Errorf("%w: target: no device (bad-request)", ErrHandshake), true},
		{live, fmt.Errorf("%w: dial: %w", ErrHandshake, errUnreachable), false},
		{live, transfer.ErrClosed, false},
		{live, fmt.Errorf("x: %w", transfer.ErrRejected), false},
		{live, transfer.ErrInvalidArgument, false},
		{live, context.DeadlineExceeded, false},
		{done, errors.New("work completion"), false},
	} {
		if got := retryable(tc.ctx, tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}

func TestDeviceNames(t *testing.T) {
	avail := []string{"mlx5_0", "mlx5_1", "mlx5_2"}
	for _, tc := range []struct {
		name      string
		cfg       Config
		want      []string
		wantNamed bool
	}{
		{"default: all", Config{}, avail, false},
		{"one", Config{Device: "mlx5_1"}, []string{"mlx5_1"}, true},
		{"list, even absent", Config{Devices: []string{"mlx5_2", "mlx5_7"}}, []string{"mlx5_2", "mlx5_7"}, true},
		{"from the matrix", Config{Matrix: map[string][2][]string{"cpu:1": {{"mlx5_2"}, {"mlx5_9"}}, "cpu:0": {{"mlx5_1"}, {}}}}, []string{"mlx5_1", "mlx5_2"}, false},
		{"matrix names nothing here", Config{Matrix: map[string][2][]string{"cpu:0": {{"x"}, {}}}}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, named := tc.cfg.deviceNames(avail)
			if !slices.Equal(got, tc.want) || named != tc.wantNamed {
				t.Errorf("deviceNames = %v, %t; want %v, %t", got, named, tc.want, tc.wantNamed)
			}
		})
	}
}
