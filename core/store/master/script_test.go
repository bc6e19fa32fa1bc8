package master

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
)

// rewrite regenerates the expected output of the testdata scripts:
//
//	go test ./core/store/master -run TestScripts -rewrite
var rewrite = flag.Bool("rewrite", false, "rewrite the expected output in testdata/*.txt")

// TestScripts runs the data-driven scripts in testdata. Each case is a
// command line, a "----" line and the expected output, ended by a blank
// line; '#' lines are comments. Commands (args are key=value):
//
//	new [lease=D] [discard=D] [release=D] [ttl=D] [watermark=F] [ratio=F]
//	    [strategy=S] [softpin=D] [keep-soft=true]
//	mount id=S size=N [client=C]          unmount id=S [client=C]
//	put-start client=C key=K size=N [replicas=N] [prefer=ID] [pin=soft|hard|both]
//	put-end client=C key=K                revoke client=C key=K
//	put client=C key=K size=N [replicas=N] [prefer=ID] [pin=...]   (start + end)
//	fill client=C prefix=P n=N size=N     (n complete puts P0..P(n-1))
//	get key=K   exist key=K   remove key=K [force=true]   ping client=C
//	remove-regex re=R [force=true]   remove-all [force=true]   getsize key=K
//	advance d=D   tick   stats   keys
//
// Replicas print as segment-id+offset; a striped replica as its slices
// segment-id+offset:size joined by "|".
func TestScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScript(t, f) })
	}
}

type scriptEnv struct {
	m   *Master
	clk *fakeClock
}

func runScript(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	env := &scriptEnv{}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	lineNo := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		lineNo++
		return sc.Text(), true
	}
	for {
		line, ok := next()
		if !ok {
			break
		}
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		cmdLine := lineNo
		sep, ok := next()
		if !ok || sep != "----" {
			t.Fatalf("%s:%d: command %q not followed by ----", path, cmdLine, line)
		}
		var want []string
		for {
			l, ok := next()
			if !ok || l == "" {
				break
			}
			want = append(want, l)
		}
		got := env.exec(t, fmt.Sprintf("%s:%d", path, cmdLine), line)
		out.WriteString(line + "\n----\n")
		for _, l := range got {
			out.WriteString(l + "\n")
		}
		out.WriteString("\n")
		if !*rewrite && strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", path, cmdLine, line, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *scriptEnv) exec(t *testing.T, where, line string) []string {
	t.Helper()
	fields := strings.Fields(line)
	cmd, args := fields[0], map[string]string{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("%s: argument %q is not key=value", where, f)
		}
		args[k] = v
	}
	str := func(k, def string) string {
		if v, ok := args[k]; ok {
			return v
		}
		if def == "\x00" {
			t.Fatalf("%s: %s needs %s=", where, cmd, k)
		}
		return def
	}
	num := func(k, def string) uint64 {
		n, err := strconv.ParseUint(str(k, def), 10, 64)
		if err != nil {
			t.Fatalf("%s: %s=%q: %v", where, k, args[k], err)
		}
		return n
	}
	dur := func(k, def string) time.Duration {
		d, err := time.ParseDuration(str(k, def))
		if err != nil {
			t.Fatalf("%s: %s: %v", where, k, err)
		}
		return d
	}
	flt := func(k, def string) float64 {
		f, err := strconv.ParseFloat(str(k, def), 64)
		if err != nil {
			t.Fatalf("%s: %s: %v", where, k, err)
		}
		return f
	}
	const req = "\x00"
	if cmd != "new" && e.m == nil {
		t.Fatalf("%s: %s before new", where, cmd)
	}
	errOr := func(err error, ok ...string) []string {
		if err != nil {
			return []string{"error: " + store.CodeOf(err).String()}
		}
		if len(ok) == 0 {
			return []string{"ok"}
		}
		return ok
	}
	m := e.m
	switch cmd {
	case "new":
		e.clk = newFakeClock()
		var err error
		e.m, err = New(Config{
			DefaultLeaseTTL:        dur("lease", "10s"),
			PutStartDiscardTimeout: dur("discard", "30s"),
			PutStartReleaseTimeout: dur("release", "600s"),
			ClientTTL:              dur("ttl", "10s"),
			EvictionHighWatermark:  flt("watermark", "0.9"),
			EvictionRatio:          flt("ratio", "0.05"),
			Now:                    e.clk.Now,
			Rand:                   rand.New(rand.NewPCG(1, 2)),
			AllocationStrategy:     str("strategy", ""),
			DefaultSoftPinTTL:      dur("softpin", "30m"),
			NoEvictSoftPinned:      str("keep-soft", "false") == "true",
		})
		return errOr(err)
	case "mount":
		return errOr(m.MountSegment(testSeg(str("id", req), num("size", req)), str("client", "c1")))
	case "unmount":
		return errOr(m.UnmountSegment(str("id", req), str("client", "c1")))
	case "put-start", "put":
		client, key := str("client", req), str("key", req)
		cfg := ReplicaConfig{ReplicaNum: int(num("replicas", "1"))}
		if p := str("prefer", ""); p != "" {
			cfg.PreferredSegment = "node-" + p
		}
		switch pin := str("pin", ""); pin {
		case "soft":
			cfg.WithSoftPin = true
		case "hard":
			cfg.WithHardPin = true
		case "both":
			cfg.WithSoftPin, cfg.WithHardPin = true, true
		case "":
		default:
			t.Fatalf("%s: pin=%q: want soft, hard or both", where, pin)
		}
		rs, err := m.PutStart(client, key, num("size", req), cfg)
		if err == nil && cmd == "put" {
			err = m.PutEnd(client, key)
		}
		return errOr(err, e.fmtReplicas(rs))
	case "fill":
		client, prefix := str("client", req), str("prefix", req)
		n, size := num("n", req), num("size", req)
		for i := range n {
			k := fmt.Sprintf("%s%d", prefix, i)
			if _, err := m.PutStart(client, k, size, ReplicaConfig{ReplicaNum: 1}); err != nil {
				return []string{fmt.Sprintf("%s: error: %s", k, store.CodeOf(err))}
			}
			if err := m.PutEnd(client, k); err != nil {
				return []string{fmt.Sprintf("%s: error: %s", k, store.CodeOf(err))}
			}
		}
		return []string{"ok"}
	case "put-end":
		return errOr(m.PutEnd(str("client", req), str("key", req)))
	case "revoke":
		return errOr(m.PutRevoke(str("client", req), str("key", req)))
	case "get":
		rs, ttl, err := m.GetReplicaList(str("key", req))
		return errOr(err, fmt.Sprintf("%s lease=%v", e.fmtReplicas(rs), ttl))
	case "exist":
		ok, err := m.ExistKey(str("key", req))
		return errOr(err, strconv.FormatBool(ok))
	case "remove":
		return errOr(m.Remove(str("key", req), str("force", "false") == "true"))
	case "remove-regex":
		n, err := m.RemoveByRegex(str("re", req), str("force", "false") == "true")
		return errOr(err, fmt.Sprintf("removed %d", n))
	case "remove-all":
		return []string{fmt.Sprintf("removed %d", m.RemoveAll(str("force", "false") == "true"))}
	case "getsize":
		n, err := m.GetSize(str("key", req))
		return errOr(err, strconv.FormatUint(n, 10))
	case "ping":
		need, err := m.Ping(str("client", req))
		if need {
			return errOr(err, "need-remount")
		}
		return errOr(err)
	case "advance":
		e.clk.Advance(dur("d", req))
		return []string{"ok"}
	case "tick":
		return []string{fmt.Sprintf("evicted %d", m.Tick())}
	case "stats":
		st := m.Stats()
		lines := []string{fmt.Sprintf("used %d/%d discarded %d objects %d segments %d clients %d evicted %d (%d bytes) runs %d allocfail %d",
			st.Used, st.Capacity, st.DiscardedBytes, st.Objects, st.Segments, st.Clients, st.EvictedObjects, st.EvictedBytes, st.EvictionRuns, st.AllocFailures)}
		if st.SoftPinned+st.HardPinned > 0 || st.PartialPuts+st.StripedPuts > 0 {
			lines = append(lines, fmt.Sprintf("  pinned soft %d hard %d, puts partial %d striped %d", st.SoftPinned, st.HardPinned, st.PartialPuts, st.StripedPuts))
		}
		for _, sd := range st.SegmentsDetail {
			lines = append(lines, fmt.Sprintf("  %s: used %d/%d objects %d", sd.ID, sd.Used, sd.Capacity, sd.Objects))
		}
		return lines
	case "keys":
		// Reads the table directly so that listing grants no lease.
		var ks []string
		for o := range m.objects.all {
			ks = append(ks, o.key)
		}
		sort.Strings(ks)
		var lines []string
		for _, k := range ks {
			o := m.objects.get(k)
			state := "in-progress"
			if o.complete {
				state = "complete"
			}
			lines = append(lines, fmt.Sprintf("%s %s owner=%s size=%d replicas=%d", k, state, m.owners.name(o.owner), o.size, o.nreps()))
		}
		if len(lines) == 0 {
			return []string{"(none)"}
		}
		return lines
	}
	t.Fatalf("%s: unknown command %q", where, cmd)
	return nil
}

func (e *scriptEnv) fmtReplicas(rs []Replica) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		if len(r.Slices) == 0 {
			parts[i] = fmt.Sprintf("%s+%d", r.SegmentID, r.Addr-e.m.segs[r.SegmentID].Base)
			continue
		}
		var ss []string
		for _, x := range r.Slices {
			ss = append(ss, fmt.Sprintf("%s+%d:%d", x.SegmentID, x.Addr-e.m.segs[x.SegmentID].Base, x.Size))
		}
		parts[i] = strings.Join(ss, "|")
	}
	return strings.Join(parts, " ")
}
