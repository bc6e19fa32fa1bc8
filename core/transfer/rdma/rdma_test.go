package rdma

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/mooncake-go/mooncake/core/transfer"
)

// TestNoDevice runs in both builds: without the rdma tag every constructor
// reports ErrNotBuilt; with it, on a host without an RDMA device, ErrNoDevice.
// Both must match transfer.ErrUnsupported so the engine can fall back to TCP.
func TestNoDevice(t *testing.T) {
	devs, err := Available()
	if builtWithVerbs && err == nil {
		t.Skipf("RDMA devices present (%v): the no-device path is not testable here", devs)
	}
	want, wantText := ErrNotBuilt, "unsupported: rdma (built without the rdma tag)"
	if builtWithVerbs {
		want, wantText = ErrNoDevice, "unsupported: rdma: no RDMA device"
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, transfer.ErrUnsupported) || !errors.Is(err, want) {
			t.Errorf("%s: err = %v, want %v", what, err, want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), wantText) {
			t.Errorf("%s: message %q does not start with %q", what, err, wantText)
		}
	}
	check("Available", err)
	if devs != nil {
		t.Errorf("Available devices = %v, want nil", devs)
	}
	for _, cfg := range []Config{{}, DefaultConfig(), {Device: "mlx5_9"}, {Devices: []string{"mlx5_8", "mlx5_9"}},
		{Matrix: map[string][2][]string{"cpu:0": {{"mlx5_9"}, {}}}, RoundRobin: true, DestDeviceAffinity: true}} {
		tr, err := New(cfg)
		check("New", err)
		if tr != nil {
			t.Errorf("New returned a transport with error %v", err)
		}
	}
	t.Log(err)
}

func TestConfigValidate(t *testing.T) {
	def := DefaultConfig()
	if def.Port != 1 || def.GIDIndex != GIDAuto || def.MTU != 4096 || def.MaxCQE != 4096 || def.MaxWR != 256 ||
		def.MaxSGE != 4 || def.MaxInline != 64 || def.QPsPerPeer != 2 || def.SliceSize != 65536 ||
		def.BindAddr != "127.0.0.1:0" || def.MaxMessage != 1<<20 || def.DialTimeout.Seconds() != 5 || def.RetryCount != 9 ||
		def.Device != "" || def.Devices != nil || def.Matrix != nil || def.RoundRobin || def.DestDeviceAffinity {
		t.Errorf("DefaultConfig = %+v", def)
	}
	if err := def.Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
	multi := Config{Devices: []string{"mlx5_0", "mlx5_1"}, RetryCount: -1}
	if err := multi.Validate(); err != nil || multi.RetryCount != -1 {
		t.Errorf("Validate(two devices, no retries) = %v (RetryCount %d)", err, multi.RetryCount)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"port", func(c *Config) { c.Port = 256 }},
		{"gid", func(c *Config) { c.GIDIndex = -2 }},
		{"pkey", func(c *Config) { c.PKeyIndex = -1 }},
		{"sl", func(c *Config) { c.ServiceLevel = 16 }},
		{"tc", func(c *Config) { c.TrafficClass = 256 }},
		{"mtu", func(c *Config) { c.MTU = 1500 }},
		{"cqe below wr", func(c *Config) { c.MaxCQE = 8; c.MaxWR = 16 }},
		{"sge", func(c *Config) { c.MaxSGE = -1 }},
		{"inline", func(c *Config) { c.MaxInline = -1 }},
		{"qps", func(c *Config) { c.QPsPerPeer = -1 }},
		{"slice", func(c *Config) { c.SliceSize = 2 << 30 }},
		{"message", func(c *Config) { c.MaxMessage = 10 }},
		{"device and devices", func(c *Config) { c.Device = "mlx5_0"; c.Devices = []string{"mlx5_1"} }},
		{"duplicate devices", func(c *Config) { c.Devices = []string{"mlx5_0", "mlx5_0"} }},
		{"empty device name", func(c *Config) { c.Devices = []string{"mlx5_0", ""} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			if err := c.Validate(); !errors.Is(err, transfer.ErrInvalidArgument) {
				t.Errorf("Validate = %v, want ErrInvalidArgument", err)
			}
			// New validates before looking for devices, in both builds.
			if _, err := New(c); !errors.Is(err, transfer.ErrInvalidArgument) {
				t.Errorf("New = %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestMessageCodec(t *testing.T) {
	msgs := []*message{
		{Op: opConnect, QP: &qpInfo{Device: "mlx5_0", LinkLayer: "Ethernet", LID: 0, GID: encodeGID([16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}), QPN: 0x1234, PSN: 0xabcdef, MTU: 5}, Dev: "mlx5_1", Release: []qpRef{{"mlx5_0", 7}, {"mlx5_1", 9}}},
		{Op: opMR, Addr: 0x7f0000001000, Length: 1 << 20},
		{Op: opMR, Addr: 0x7f0000000000, Length: 1 << 30, RKeys: []uint32{0xdeadbeef, 7}, Devices: []string{"mlx5_0", "mlx5_1"}, Location: "cpu:1"},
		{Op: opMR, Addr: 0x7f0000000000, Length: 1 << 30, RKeys: []uint32{1, 2}, Devices: []string{"mlx5_0", "mlx5_1"}, Location: "cpu:0", ReadOnly: true},
		{Op: opTopology},
		{Op: opTopology, Devices: []string{"mlx5_0", "mlx5_1"}, Matrix: map[string][2][]string{"cpu:0": {{"mlx5_0"}, {"mlx5_1"}}, "cpu:1": {{"mlx5_1"}, {"mlx5_0"}}}},
		{Op: opError, Code: codeRejected, Error: "transfer: address not registered: [0x10,+4)"},
	}
	var buf bytes.Buffer
	for _, m := range msgs {
		if err := writeMessage(&buf, m); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReaderSize(&buf, 16) // smaller than a message: exercises ErrBufferFull
	for i, want := range msgs {
		got, err := readMessage(r, 4096)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("message %d = %+v, %v; want %+v", i, got, err, want)
		}
	}
	if _, err := readMessage(r, 4096); err != io.EOF {
		t.Errorf("at end: %v, want io.EOF", err)
	}

	for _, tc := range []struct{ name, in string }{
		{"oversized", `{"op":"mr","error":"` + strings.Repeat("x", 300) + `"}` + "\n"},
		{"not json", "hello\n"},
		{"unknown field", `{"op":"mr","bogus":1}` + "\n"},
		{"no op", `{"addr":1}` + "\n"},
		{"truncated", `{"op":"mr"`},
		{"two values", `{"op":"mr"} {"op":"mr"}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readMessage(bufio.NewReader(strings.NewReader(tc.in)), 256)
			if !errors.Is(err, ErrHandshake) {
				t.Errorf("err = %v, want ErrHandshake", err)
			}
		})
	}
}

func TestQPInfo(t *testing.T) {
	g := [16]byte{0xfe, 0x80, 15: 0x42}
	good := qpInfo{GID: encodeGID(g), QPN: 5, PSN: 1, MTU: 5}
	if got, err := checkQPInfo(&good); err != nil || got != g {
		t.Errorf("checkQPInfo(good) = %x, %v", got, err)
	}
	for name, mod := range map[string]func(*qpInfo){
		"qpn 0":     func(q *qpInfo) { q.QPN = 0 },
		"qpn wide":  func(q *qpInfo) { q.QPN = 1 << 24 },
		"psn wide":  func(q *qpInfo) { q.PSN = 1 << 24 },
		"mtu":       func(q *qpInfo) { q.MTU = 6 },
		"gid short": func(q *qpInfo) { q.GID = "fe80" },
		"gid hex":   func(q *qpInfo) { q.GID = strings.Repeat("zz", 16) },
	} {
		q := good
		mod(&q)
		if _, err := checkQPInfo(&q); !errors.Is(err, ErrHandshake) {
			t.Errorf("%s: err = %v, want ErrHandshake", name, err)
		}
	}
	if _, err := checkQPInfo(nil); !errors.Is(err, ErrHandshake) {
		t.Errorf("nil: err = %v", err)
	}
}

func TestRegionCache(t *testing.T) {
	const (
		local    = accLocalWrite
		remote   = accLocalWrite | accRemoteRead | accRemoteWrite
		readOnly = accLocalWrite | accRemoteRead
	)
	var c regionCache
	c.add(region{addr: 1000, length: 100, lkeys: []uint32{1}, access: local})
	c.add(region{addr: 2000, length: 100, lkeys: []uint32{2}, rkeys: []uint32{22}, access: remote})
	c.add(region{addr: 3000, length: 100, lkeys: []uint32{3}, rkeys: []uint32{33}, access: readOnly})
	c.add(region{addr: 4000, length: 100, lkeys: []uint32{4}, rkeys: []uint32{44}, access: accRemoteRead}) // mapped read-only
	for _, tc := range []struct {
		addr, n  uint64
		need     access
		wantKey  uint32
		wantFind bool
	}{
		{1000, 100, local, 1, true},
		{1050, 50, 0, 1, true},
		{1050, 51, local, 0, false},
		{999, 2, local, 0, false},
		{1000, 100, accRemoteRead, 0, false}, // local-only region
		{2010, 10, accRemoteRead | accRemoteWrite, 2, true},
		{2010, 10, local, 2, true}, // a remote region serves local use too
		{3010, 10, accRemoteRead, 3, true},
		{3010, 10, accRemoteRead | accRemoteWrite, 0, false}, // read-only to peers
		{3010, 10, local, 3, true},
		{4010, 10, accRemoteRead, 4, true},
		{4010, 10, 0, 4, true},              // a send's source
		{4010, 10, local, 0, false},         // not a READ's destination
		{2010, 10, accRemoteRead, 0, false}, // read-only to peers: never a registration granting writes
	} {
		r, ok := c.find(tc.addr, tc.n, tc.need)
		if ok != tc.wantFind || (ok && r.lkeys[0] != tc.wantKey) {
			t.Errorf("find(%d,+%d,need=%b) = %+v, %t", tc.addr, tc.n, tc.need, r, ok)
		}
	}
	if got, added := c.add(region{addr: 1010, length: 10, lkeys: []uint32{9}, access: local}); added || got.lkeys[0] != 1 {
		t.Errorf("add(covered) = %+v, %t; want existing region", got, added)
	}
	if _, added := c.add(region{addr: 1010, length: 10, lkeys: []uint32{9}, access: remote}); !added {
		t.Error("add(remote over local-only) not added")
	}
	if _, added := c.add(region{addr: 3010, length: 10, lkeys: []uint32{8}, access: remote}); !added {
		t.Error("add(writable over read-only) not added")
	}
	// A registration read-only to peers is not answered by the writable
	// one just added over it, nor by the one at 2000.
	if got, added := c.add(region{addr: 3012, length: 4, lkeys: []uint32{7}, access: readOnly}); added || got.lkeys[0] != 3 {
		t.Errorf("add(read-only inside read-only and writable) = %+v, %t; want the read-only region at 3000", got, added)
	}
	if got, added := c.add(region{addr: 2010, length: 10, lkeys: []uint32{6}, access: readOnly}); !added || got.lkeys[0] != 6 {
		t.Errorf("add(read-only inside writable) = %+v, %t; want it added", got, added)
	}
	if got := c.removeOverlapping(1015, 100); len(got) != 2 {
		t.Errorf("removeOverlapping = %+v, want the 2 regions at 1000 and 1010", got)
	}
	if _, ok := c.find(1000, 1, 0); ok {
		t.Error("region survived removeOverlapping")
	}
	if got := c.removeAll(); len(got) != 5 || got[0].lkeys[0] != 2 {
		t.Errorf("removeAll = %+v", got)
	}
}

// TestRegisterWith: a registration asking for local write but not remote
// write is tried again without local write when refused (memory mapped
// read-only); any other refusal stands, with the first error.
func TestRegisterWith(t *testing.T) {
	refuseLocalWrite := func(calls *[]access) func(access) (int, error) {
		return func(a access) (int, error) {
			*calls = append(*calls, a)
			if a.has(accLocalWrite) {
				return 0, fmt.Errorf("ibv_reg_mr: %w", syscall.EFAULT)
			}
			return 7, nil
		}
	}
	for _, tc := range []struct {
		name      string
		want, got access
		calls     int
		fail      bool
	}{
		{"read-only to peers", accLocalWrite | accRemoteRead, accRemoteRead, 2, false},
		{"local use", accLocalWrite, 0, 2, false},
		{"writable by peers: no retry", accLocalWrite | accRemoteRead | accRemoteWrite, 0, 1, true},
	} {
		var calls []access
		m, got, err := registerWith(tc.want, refuseLocalWrite(&calls))
		if tc.fail {
			if err == nil || len(calls) != tc.calls {
				t.Errorf("%s: err %v after %d calls, want EFAULT after %d", tc.name, err, len(calls), tc.calls)
			}
			continue
		}
		if err != nil || m != 7 || got != tc.got || len(calls) != tc.calls {
			t.Errorf("%s: = %d, %b, %v after %v; want 7, %b after %d calls", tc.name, m, got, err, calls, tc.got, tc.calls)
		}
	}
	// Memory every registration accepts: one call, what was asked.
	n := 0
	if _, got, err := registerWith(accLocalWrite|accRemoteRead, func(access) (int, error) { n++; return 1, nil }); err != nil || n != 1 || got != accLocalWrite|accRemoteRead {
		t.Errorf("accepted: %b, %v after %d calls", got, err, n)
	}
	// Refused both times: the first attempt's error.
	n = 0
	_, _, err := registerWith(accLocalWrite, func(access) (int, error) { n++; return 0, fmt.Errorf("attempt %d: %w", n, syscall.EFAULT) })
	if err == nil || !strings.HasPrefix(err.Error(), "attempt 1") || n != 2 {
		t.Errorf("refused twice: %v after %d calls, want attempt 1 after 2", err, n)
	}
	// Refused for another reason (out of memory, a bad PD): no retry.
	n = 0
	if _, _, err := registerWith(accLocalWrite|accRemoteRead, func(access) (int, error) { n++; return 0, syscall.ENOMEM }); !errors.Is(err, syscall.ENOMEM) || n != 1 {
		t.Errorf("ENOMEM: %v after %d calls, want it after 1", err, n)
	}
}

// TestPeerRegionFor: the initiator's rkey cache. A region is asked for
// once and reused; a WRITE to a region the target registered read-only is
// refused with ErrRejected after asking again once, and goes through once
// the target answers writable.
func TestPeerRegionFor(t *testing.T) {
	var cache regionCache
	fetches := 0
	answer := region{addr: 0x1000, length: 0x1000, rkeys: []uint32{1}, devices: []string{"mlx5_0"}, access: accRemoteRead}
	fetch := func() (region, error) { fetches++; return answer, nil }
	get := func(op transfer.Opcode) (region, error) { return peerRegion(&cache, op, 0x1800, 8, fetch) }

	if r, err := get(transfer.Read); err != nil || r.rkeys[0] != 1 || fetches != 1 {
		t.Fatalf("first READ: %+v, %v after %d fetches", r, err, fetches)
	}
	if _, err := get(transfer.Read); err != nil || fetches != 1 {
		t.Errorf("second READ: %v after %d fetches, want the cached region", err, fetches)
	}
	if _, err := get(transfer.Write); !errors.Is(err, transfer.ErrRejected) || fetches != 2 {
		t.Errorf("WRITE to read-only: %v after %d fetches, want ErrRejected after asking again", err, fetches)
	}
	answer = region{addr: 0x1000, length: 0x1000, rkeys: []uint32{2}, devices: []string{"mlx5_0"}, access: accRemoteRead | accRemoteWrite}
	if r, err := get(transfer.Write); err != nil || r.rkeys[0] != 2 || fetches != 3 {
		t.Errorf("WRITE once writable: %+v, %v after %d fetches", r, err, fetches)
	}
	if r, err := get(transfer.Write); err != nil || r.rkeys[0] != 2 || fetches != 3 {
		t.Errorf("second WRITE: %+v, %v after %d fetches, want the cached writable region", r, err, fetches)
	}
	bad := errors.New("control channel down")
	if _, err := peerRegion(&cache, transfer.Read, 0x9000, 8, func() (region, error) { return region{}, bad }); !errors.Is(err, bad) {
		t.Errorf("fetch error: %v", err)
	}
}

// TestMRGrant: a buffer peers may write is registered for remote reads
// and writes, a read-only registration (AddReadOnly) for remote reads
// only, and a local-only or unregistered range is refused.
func TestMRGrant(t *testing.T) {
	var reg transfer.Registry
	w, err := reg.Add(make([]byte, 4096), "cpu:0", true)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := reg.AddReadOnly(make([]byte, 4096), "cpu:0")
	if err != nil {
		t.Fatal(err)
	}
	lo, err := reg.Add(make([]byte, 4096), "cpu:0", false)
	if err != nil {
		t.Fatal(err)
	}
	grant, need, err := mrGrant(&reg, w.Addr+8, 64)
	if err != nil || grant != accLocalWrite|accRemoteRead|accRemoteWrite || need != accRemoteRead|accRemoteWrite {
		t.Errorf("writable: grant %b need %b, %v", grant, need, err)
	}
	grant, need, err = mrGrant(&reg, ro.Addr+8, 64)
	if err != nil || grant != accLocalWrite|accRemoteRead || need != accRemoteRead {
		t.Errorf("read-only: grant %b need %b, %v", grant, need, err)
	}
	if _, _, err := mrGrant(&reg, lo.Addr, 64); err == nil {
		t.Error("local-only buffer granted")
	}
	if _, _, err := mrGrant(&reg, ro.Addr+4090, 64); err == nil {
		t.Error("range past the read-only buffer granted")
	}
}

func TestPeerRegion(t *testing.T) {
	m := &message{Op: opMR, Addr: 0x1000, Length: 0x1000, RKeys: []uint32{11, 22}, Devices: []string{"mlx5_0", "mlx5_1"}, Location: "cpu:1"}
	r, err := checkMR(m, 0x1800, 0x100)
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := r.rkeyOn("mlx5_1"); !ok || k != 22 || r.location != "cpu:1" {
		t.Errorf("rkeyOn(mlx5_1) = %d, %t; location %q", k, ok, r.location)
	}
	if _, ok := r.rkeyOn("mlx5_2"); ok {
		t.Error("rkeyOn(unknown device) found a key")
	}
	noLoc := *m
	noLoc.Location = ""
	if r, err := checkMR(&noLoc, 0x1000, 1); err != nil || r.location != "*" {
		t.Errorf("no location: %q, %v; want *", r.location, err)
	}
	for name, mod := range map[string]func(*message){
		"no devices":      func(m *message) { m.Devices, m.RKeys = nil, nil },
		"keys != devices": func(m *message) { m.RKeys = m.RKeys[:1] },
		"not covering":    func(m *message) { m.Length = 0x100 },
	} {
		bad := *m
		mod(&bad)
		if _, err := checkMR(&bad, 0x1800, 0x100); !errors.Is(err, ErrHandshake) {
			t.Errorf("%s: err = %v, want ErrHandshake", name, err)
		}
	}
}

// TestMRMessageAccess: the opMR answer says whether peers may write the
// region, and the initiator's region keeps it (an answer without the
// field, from an older target, allows writes).
func TestMRMessageAccess(t *testing.T) {
	devs := []string{"mlx5_0"}
	for _, tc := range []struct {
		name      string
		local     access
		wantRO    bool
		wantWrite bool
	}{
		{"writable", accLocalWrite | accRemoteRead | accRemoteWrite, false, true},
		{"read-only", accLocalWrite | accRemoteRead, true, false},
		{"read-only mapping", accRemoteRead, true, false},
	} {
		m := mrMessage(region{addr: 0x1000, length: 0x1000, rkeys: []uint32{5}, location: "cpu:0", access: tc.local}, devs)
		var buf bytes.Buffer
		if err := writeMessage(&buf, m); err != nil {
			t.Fatal(err)
		}
		got, err := readMessage(bufio.NewReader(&buf), 4096)
		if err != nil {
			t.Fatal(err)
		}
		r, err := checkMR(got, 0x1000, 8)
		if err != nil || got.ReadOnly != tc.wantRO || !r.access.has(accRemoteRead) || r.access.has(accRemoteWrite) != tc.wantWrite {
			t.Errorf("%s: ReadOnly %t, peer region access %b, %v; want ReadOnly %t, write %t", tc.name, got.ReadOnly, r.access, err, tc.wantRO, tc.wantWrite)
		}
	}
	old, err := readMessage(bufio.NewReader(strings.NewReader(`{"op":"mr","addr":4096,"length":4096,"rkeys":[5],"devices":["mlx5_0"]}`+"\n")), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := checkMR(old, 4096, 8); err != nil || !r.access.has(accRemoteRead|accRemoteWrite) {
		t.Errorf("answer without read_only: access %b, %v; want reads and writes", r.access, err)
	}
}

func TestRegistrationRange(t *testing.T) {
	var reg transfer.Registry
	local := make([]byte, 4096)
	remote := make([]byte, 8192)
	nowhere := make([]byte, 64)
	lb, err := reg.Add(local, "cpu:1", false)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := reg.Add(remote, "cpu:0", true)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := reg.Add(nowhere, "", true) // no location: "*"
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name             string
		addr, n          uint64
		remote           bool
		wantAddr, wantLn uint64
		wantLoc          string
	}{
		{"remote inside remote buffer", rb.Addr + 100, 10, true, rb.Addr, rb.Length, "cpu:0"},
		{"local inside local buffer", lb.Addr + 8, 8, false, lb.Addr, lb.Length, "cpu:1"},
		{"local use of remote buffer", rb.Addr, 1, false, rb.Addr, rb.Length, "cpu:0"},
		{"remote access to local-only buffer", lb.Addr + 8, 8, true, lb.Addr + 8, 8, "*"},
		{"buffer without location", wb.Addr, 64, true, wb.Addr, 64, "*"},
		{"outside every buffer", 0x10, 4, false, 0x10, 4, "*"},
	} {
		a, n, loc := registrationRange(&reg, tc.addr, tc.n, tc.remote)
		if a != tc.wantAddr || n != tc.wantLn || loc != tc.wantLoc {
			t.Errorf("%s: = [%#x,+%d) %q, want [%#x,+%d) %q", tc.name, a, n, loc, tc.wantAddr, tc.wantLn, tc.wantLoc)
		}
	}
	// A Target that cannot list buffers: exactly the range, any device.
	if a, n, loc := registrationRange(resolveOnly{}, 0x1000, 64, true); a != 0x1000 || n != 64 || loc != "*" {
		t.Errorf("resolve-only target: [%#x,+%d) %q", a, n, loc)
	}
}

type resolveOnly struct{}

func (resolveOnly) Resolve(addr, length uint64) ([]byte, error) { return make([]byte, length), nil }

func (r resolveOnly) ResolveWrite(addr, length uint64) ([]byte, error) {
	return r.Resolve(addr, length)
}

func TestSplitSpans(t *testing.T) {
	for _, tc := range []struct {
		n, size uint64
		want    []span
	}{
		{10, 4, []span{{0, 4}, {4, 4}, {8, 2}}},
		{8, 4, []span{{0, 4}, {4, 4}}},
		{3, 4, []span{{0, 3}}},
		{0, 4, []span{}},
	} {
		if got := splitSpans(tc.n, tc.size); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitSpans(%d, %d) = %v, want %v", tc.n, tc.size, got, tc.want)
		}
	}
}

func TestStubAndCommonAPI(t *testing.T) {
	if mtuEnum(4096) != 5 || mtuEnum(256) != 1 || mtuEnum(1500) != 0 {
		t.Error("mtuEnum")
	}
	var tr *Transport
	if !builtWithVerbs {
		tr = &Transport{}
		if tr.Protocol() != "rdma" || tr.Device() != "" || tr.Devices() != nil || tr.Matrix() != nil || tr.DeregisterMemory(0, 1) != 0 || tr.Close() != nil {
			t.Error("stub methods")
		}
		if err := tr.Listen("seg", resolveOnly{}); !errors.Is(err, ErrNotBuilt) {
			t.Errorf("stub Listen = %v", err)
		}
		if _, err := tr.Dial(t.Context(), metadataDesc(), metadataRPC()); !errors.Is(err, ErrNotBuilt) {
			t.Errorf("stub Dial = %v", err)
		}
	}
}
