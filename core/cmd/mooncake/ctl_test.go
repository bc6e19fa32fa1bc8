package main

import (
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/store/server"
)

// startCtlMaster serves an in-process master on 127.0.0.1 holding two
// segments and a few objects:
//
//	seg-a (node-a, 1 MiB, client c1, embedded),
//	seg-b (node-b, 1 MiB, client c1, standalone: takes the small objects)
//	app/1 100 bytes x2, app/2 200 bytes leased, app/3 being written,
//	pinned 300 bytes soft+hard, big 1.5 MiB striped over both segments
func startCtlMaster(t *testing.T) *server.Process {
	t.Helper()
	p, err := server.Start(server.ProcessConfig{
		Master:  master.Config{ClientTTL: time.Hour},
		RPCAddr: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	var ferr error
	p.Server.Do(func(m *master.Master) {
		must := func(err error) {
			if err != nil && ferr == nil {
				ferr = err
			}
		}
		must(m.MountSegment(master.Segment{ID: "seg-a", Name: "node-a", Base: 1 << 32, Size: 1 << 20, Protocol: "tcp"}, "c1"))
		must(m.MountSegment(master.Segment{ID: "seg-b", Name: "node-b", Base: 2 << 32, Size: 1 << 20, Protocol: "tcp", Kind: store.SegmentStandalone}, "c1"))
		put := func(key string, size uint64, cfg master.ReplicaConfig, end bool) {
			_, err := m.PutStart("c1", key, size, cfg)
			must(err)
			if end {
				must(m.PutEnd("c1", key))
			}
		}
		put("app/1", 100, master.ReplicaConfig{ReplicaNum: 2}, true)
		put("app/2", 200, master.ReplicaConfig{ReplicaNum: 1}, true)
		put("app/3", 50, master.ReplicaConfig{ReplicaNum: 1}, false)
		put("pinned", 300, master.ReplicaConfig{ReplicaNum: 1, WithSoftPin: true, WithHardPin: true}, true)
		put("big", 1536<<10, master.ReplicaConfig{ReplicaNum: 1}, true)
		_, _, err := m.GetReplicaList("app/2")
		must(err)
	})
	if ferr != nil {
		t.Fatalf("populate master: %v", ferr)
	}
	return p
}

// ok runs `mooncake ctl --master addr args...`, wants exit 0 and no
// stderr, and returns stdout's lines.
func ctlOK(t *testing.T, addr string, args ...string) []string {
	t.Helper()
	r := mooncake(t, 30*time.Second, append([]string{"ctl", "--master", addr}, args...)...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("ctl %v: exit %d, stderr %q", args, r.code, r.stderr)
	}
	return strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
}

// row finds the line whose first field is first and returns its fields.
func row(t *testing.T, lines []string, first string) []string {
	t.Helper()
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return f
		}
	}
	t.Fatalf("no line starting with %q in:\n%s", first, strings.Join(lines, "\n"))
	return nil
}

func TestCtl(t *testing.T) {
	p := startCtlMaster(t)
	addr := p.RPCAddr

	t.Run("segments", func(t *testing.T) {
		lines := ctlOK(t, addr, "segments")
		if h := strings.Fields(lines[0]); strings.Join(h, " ") != "ID NAME CAPACITY USED USED% OBJECTS CLIENT KIND" || len(lines) != 3 {
			t.Fatalf("table:\n%s", strings.Join(lines, "\n"))
		}
		a, b := row(t, lines, "seg-a"), row(t, lines, "seg-b")
		if a[1] != "node-a" || a[2] != "1048576" || a[6] != "c1" || a[7] != "embedded" || b[1] != "node-b" || b[7] != "standalone" {
			t.Fatalf("rows %v %v", a, b)
		}
		// big fills one segment's largest range and the rest of the other;
		// together the segments hold every byte written.
		used := atoi(t, a[3]) + atoi(t, b[3])
		if want := 100*2 + 200 + 50 + 300 + 1536<<10; used != want {
			t.Fatalf("used %d, want %d", used, want)
		}
	})
	t.Run("keys", func(t *testing.T) {
		lines := ctlOK(t, addr, "keys")
		if len(lines) != 6 || strings.Join(strings.Fields(lines[0]), " ") != "KEY SIZE STATE REPLICAS LEASE PIN" {
			t.Fatalf("table:\n%s", strings.Join(lines, "\n"))
		}
		for _, want := range [][]string{
			{"app/1", "100", "complete", "2", "-", "-"},
			{"app/3", "50", "writing", "1", "-", "-"},
			{"big", "1572864", "complete", "1", "-", "-"},
		} {
			if got := row(t, lines, want[0]); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("row %v, want %v", got, want)
			}
		}
		if r := row(t, lines, "app/2"); r[4] == "-" {
			t.Fatalf("app/2 shows no lease: %v", r)
		}
		if r := row(t, lines, "pinned"); !strings.HasPrefix(r[5], "hard,soft(") {
			t.Fatalf("pinned row %v", r)
		}
		lines = ctlOK(t, addr, "keys", "--prefix", "app/", "--limit", "2")
		if len(lines) != 4 || lines[3] != "(2 of 3 keys; raise --limit)" || row(t, lines, "app/1") == nil || row(t, lines, "app/2") == nil {
			t.Fatalf("prefix+limit:\n%s", strings.Join(lines, "\n"))
		}
	})
	t.Run("stat", func(t *testing.T) {
		lines := ctlOK(t, addr, "stat", "big")
		if r := row(t, lines, "size"); r[1] != "1572864" {
			t.Fatalf("size row %v", r)
		}
		if r := row(t, lines, "replicas"); r[1] != "1" {
			t.Fatalf("replicas row %v", r)
		}
		// The striped replica shows one placement per segment.
		if r := row(t, lines, "replica"); len(r) != 4 || !strings.HasPrefix(r[2], "node-") || !strings.HasPrefix(r[3], "node-") {
			t.Fatalf("replica row %v", r)
		}
		lines = ctlOK(t, addr, "stat", "app/1")
		if r := row(t, lines, "replicas"); r[1] != "2" {
			t.Fatalf("replicas row %v", r)
		}
	})
	t.Run("usage", func(t *testing.T) {
		lines := ctlOK(t, addr, "usage")
		for k, want := range map[string]string{"capacity": "2097152", "objects": "5", "segments": "2", "soft_pinned": "1", "hard_pinned": "1", "striped_puts": "1"} {
			if r := row(t, lines, k); r[1] != want {
				t.Fatalf("%s row %v, want %s", k, r, want)
			}
		}
		if r := row(t, lines, "reserved"); len(r) < 6 || r[2] != "bytes" || r[5] != "reservations" {
			t.Fatalf("reserved row %v", r)
		}
	})
	t.Run("remove", func(t *testing.T) {
		// app/2 is leased, pinned hard-pinned: both need --force.
		for _, key := range []string{"app/2", "pinned"} {
			r := mooncake(t, 30*time.Second, "ctl", "--master", addr, "remove", key)
			if line := oneLine(t, r.stderr); r.code != 1 || !strings.Contains(line, "OBJECT_HAS_LEASE") {
				t.Fatalf("remove %s: exit %d, %q", key, r.code, line)
			}
			if lines := ctlOK(t, addr, "remove", "--force", key); lines[0] != "removed "+key {
				t.Fatalf("remove --force %s: %v", key, lines)
			}
		}
		r := mooncake(t, 30*time.Second, "ctl", "--master", addr, "stat", "pinned")
		if line := oneLine(t, r.stderr); r.code != 1 || !strings.Contains(line, "OBJECT_NOT_FOUND") {
			t.Fatalf("stat removed key: exit %d, %q", r.code, line)
		}
	})
	t.Run("remove-regex", func(t *testing.T) {
		if lines := ctlOK(t, addr, "remove-regex", "^app/"); lines[0] != "removed 1 keys" { // app/3 is being written
			t.Fatalf("remove-regex: %v", lines)
		}
		if lines := ctlOK(t, addr, "remove-regex", "--force", "."); lines[0] != "removed 1 keys" { // big
			t.Fatalf("remove-regex --force: %v", lines)
		}
		if lines := ctlOK(t, addr, "keys"); len(lines) != 2 || row(t, lines, "app/3") == nil {
			t.Fatalf("left:\n%s", strings.Join(lines, "\n"))
		}
	})
}

// TestCtlErrors: usage errors exit 2, failures 1, each with one line on
// stderr and nothing on stdout.
func TestCtlErrors(t *testing.T) {
	p := startCtlMaster(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"ctl"}, 2, "missing command"},
		{[]string{"ctl", "bogus"}, 2, `unknown command "bogus"`},
		{[]string{"ctl", "--master", p.RPCAddr, "stat"}, 2, "want 1 argument"},
		{[]string{"ctl", "--master", p.RPCAddr, "stat", "a", "b"}, 2, "want 1 argument"},
		{[]string{"ctl", "--master", p.RPCAddr, "segments", "extra"}, 2, "want 0 argument"},
		{[]string{"ctl", "--master", p.RPCAddr, "keys", "--limit", "-1"}, 2, "--limit -1"},
		{[]string{"ctl", "--master", p.RPCAddr, "keys", "--limit", "many"}, 2, "invalid argument"},
		{[]string{"ctl", "--master", p.RPCAddr, "remove-regex", "("}, 2, "missing closing"},
		{[]string{"ctl", "--master", p.RPCAddr, "remove-regex", ""}, 2, "empty regex"},
		{[]string{"ctl", "--master", p.RPCAddr, "--timeout", "0s", "usage"}, 2, "--timeout"},
		{[]string{"ctl", "--nope", "usage"}, 2, "unknown flag"},
		{[]string{"ctl", "--master", p.RPCAddr, "stat", "missing"}, 1, "OBJECT_NOT_FOUND"},
		{[]string{"ctl", "--master", p.RPCAddr, "stat", "app/3"}, 1, "REPLICA_IS_NOT_READY"},
		{[]string{"ctl", "--master", p.RPCAddr, "remove", "missing"}, 1, "OBJECT_NOT_FOUND"},
		{[]string{"ctl", "--master", p.RPCAddr, "stat", strings.Repeat("k", master.MaxKeyLen+1)}, 1, "INVALID_KEY"},
		{[]string{"ctl", "--master", "127.0.0.1:1", "--timeout", "5s", "usage"}, 1, "mooncake ctl usage: cannot reach master 127.0.0.1:1: connection refused"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := mooncake(t, 30*time.Second, tc.args...)
			line := oneLine(t, r.stderr)
			if r.code != tc.code || !strings.Contains(line, tc.want) || r.stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q; want exit %d with %q", r.code, line, r.stdout, tc.code, tc.want)
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("%q is not a number", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}
