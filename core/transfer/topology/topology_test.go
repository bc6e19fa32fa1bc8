package topology

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/core/memory"
)

// buildTree materialises a fake sysfs description (see
// testdata/fake-sysfs.txt) under a temp dir and returns its root.
func buildTree(t *testing.T, spec string) string {
	t.Helper()
	f, err := os.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root := t.TempDir()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kind, rest, _ := strings.Cut(line, " ")
		path, arg, _ := strings.Cut(rest, " ")
		p := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch kind {
		case "file":
			if err := os.WriteFile(p, []byte(strings.ReplaceAll(arg, `\n`, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		case "link":
			if err := os.Symlink(arg, p); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s:%d: unknown entry %q", spec, n, kind)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return root
}

func fakeTopology(t *testing.T, cfg Config) *Topology {
	t.Helper()
	cfg.SysfsRoot = buildTree(t, "testdata/fake-sysfs.txt")
	cfg.DisableNVML = true
	topo, err := DiscoverWith(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func TestDiscoverFakeSysfs(t *testing.T) {
	topo := fakeTopology(t, Config{})
	if len(topo.Warnings) > 0 {
		t.Errorf("warnings: %q", topo.Warnings)
	}
	wantNUMA := []NUMANode{
		{ID: 0, CPUs: []int{0, 1, 2, 3, 8, 9, 10, 11}, MemoryBytes: 16 << 30, Distances: []int{10, 21}},
		{ID: 1, CPUs: []int{4, 5, 6, 7, 12, 13, 14, 15}, MemoryBytes: 32 << 30, Distances: []int{21, 10}},
	}
	if !reflect.DeepEqual(topo.NUMA, wantNUMA) {
		t.Errorf("NUMA:\n got %+v\nwant %+v", topo.NUMA, wantNUMA)
	}
	port := []Port{{Num: 1, State: "4: ACTIVE", LinkLayer: "InfiniBand", Rate: "200 Gb/sec (4X HDR)"}}
	wantRDMA := []RDMADevice{
		{Name: "mlx5_0", PCIBusID: "0000:1a:00.0", NUMANode: 0, PCIPath: "devices/pci0000:00/0000:00:01.0/0000:1a:00.0", Ports: port},
		{Name: "mlx5_1", PCIBusID: "0000:8a:00.0", NUMANode: 1, PCIPath: "devices/pci0000:80/0000:80:01.0/0000:8a:00.0", Ports: port},
	}
	if !reflect.DeepEqual(topo.RDMA, wantRDMA) {
		t.Errorf("RDMA:\n got %+v\nwant %+v", topo.RDMA, wantRDMA)
	}
	wantGPUs := []GPU{{Index: 0, Name: "NVIDIA 10de:2335", PCIBusID: "0000:1b:00.0", NUMANode: 0,
		PCIPath: "devices/pci0000:00/0000:00:01.0/0000:1b:00.0", Source: SourceSysfs}}
	if !reflect.DeepEqual(topo.GPUs, wantGPUs) {
		t.Errorf("GPUs:\n got %+v\nwant %+v", topo.GPUs, wantGPUs)
	}
	if topo.NVML != NVMLDisabled {
		t.Errorf("NVML = %q, want %q", topo.NVML, NVMLDisabled)
	}

	want := map[string][2][]string{
		"cpu:0":  {{"mlx5_0"}, {"mlx5_1"}},
		"cpu:1":  {{"mlx5_1"}, {"mlx5_0"}},
		"cuda:0": {{"mlx5_0"}, {"mlx5_1"}},
	}
	m := topo.PriorityMatrix()
	if !reflect.DeepEqual(m, want) {
		t.Errorf("matrix:\n got %v\nwant %v", m, want)
	}
	js, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"cpu:0":[["mlx5_0"],["mlx5_1"]],"cpu:1":[["mlx5_1"],["mlx5_0"]],"cuda:0":[["mlx5_0"],["mlx5_1"]]}`
	if string(js) != wantJSON {
		t.Errorf("matrix JSON:\n got %s\nwant %s", js, wantJSON)
	}
	back, err := ParseMatrix(js)
	if err != nil || !reflect.DeepEqual(back, want) {
		t.Errorf("ParseMatrix(round trip) = %v, %v", back, err)
	}
}

func TestFilters(t *testing.T) {
	for _, tc := range []struct {
		name          string
		allow, deny   []string
		want          []string
		wantCPU0      [2][]string
		wantCUDA0Pref []string
	}{
		{"none", nil, nil, []string{"mlx5_0", "mlx5_1"}, [2][]string{{"mlx5_0"}, {"mlx5_1"}}, []string{"mlx5_0"}},
		{"allow", []string{"mlx5_1"}, nil, []string{"mlx5_1"}, [2][]string{{}, {"mlx5_1"}}, []string{"mlx5_1"}},
		{"deny", nil, []string{"mlx5_0"}, []string{"mlx5_1"}, [2][]string{{}, {"mlx5_1"}}, []string{"mlx5_1"}},
		{"allow and deny", []string{"mlx5_0", "mlx5_1"}, []string{"mlx5_1"}, []string{"mlx5_0"}, [2][]string{{"mlx5_0"}, {}}, []string{"mlx5_0"}},
		{"unknown", []string{"mlx5_9"}, nil, []string{}, [2][]string{{}, {}}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := fakeTopology(t, Config{Filter: tc.allow, Exclude: tc.deny})
			got := []string{}
			for _, d := range topo.RDMA {
				got = append(got, d.Name)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("devices = %v, want %v", got, tc.want)
			}
			m := topo.PriorityMatrix()
			if !reflect.DeepEqual(m["cpu:0"], tc.wantCPU0) {
				t.Errorf("cpu:0 = %v, want %v", m["cpu:0"], tc.wantCPU0)
			}
			// With mlx5_0 gone the GPU falls back to all HCAs and picks the
			// nearest one left.
			if !reflect.DeepEqual(m["cuda:0"][0], tc.wantCUDA0Pref) {
				t.Errorf("cuda:0 preferred = %v, want %v", m["cuda:0"][0], tc.wantCUDA0Pref)
			}
		})
	}
}

func TestGPUMatrix(t *testing.T) {
	const (
		rc0   = "devices/pci0000:00"
		sw0   = rc0 + "/0000:00:01.0"
		sw1   = rc0 + "/0000:00:02.0"
		rc1   = "devices/pci0000:80/0000:80:01.0"
		gpuP  = sw0 + "/0000:1b:00.0"
		nicA  = sw0 + "/0000:1a:00.0" // same bridge as the GPU
		nicB  = sw1 + "/0000:2a:00.0" // same root complex, other bridge
		nicC  = rc1 + "/0000:8a:00.0" // other socket
		nicC2 = rc1 + "/0000:8b:00.0"
	)
	dev := func(name string, numa int, path string) RDMADevice {
		return RDMADevice{Name: name, NUMANode: numa, PCIPath: path}
	}
	for _, tc := range []struct {
		name string
		gpu  GPU
		hcas []RDMADevice
		want [2][]string
	}{
		{"nearest on same node", GPU{NUMANode: 0, PCIPath: gpuP},
			[]RDMADevice{dev("a", 0, nicA), dev("b", 0, nicB), dev("c", 1, nicC)},
			[2][]string{{"a"}, {"b", "c"}}},
		{"same node beats nearer other node", GPU{NUMANode: 0, PCIPath: gpuP},
			[]RDMADevice{dev("b", 0, nicB), dev("c", 1, nicA)},
			[2][]string{{"b"}, {"c"}}},
		{"ties are all preferred", GPU{NUMANode: 1, PCIPath: rc1 + "/0000:8c:00.0"},
			[]RDMADevice{dev("a", 0, nicA), dev("c", 1, nicC), dev("d", 1, nicC2)},
			[2][]string{{"c", "d"}, {"a"}}},
		{"no NUMA info: nearest of all", GPU{NUMANode: -1, PCIPath: gpuP},
			[]RDMADevice{dev("a", -1, nicA), dev("b", -1, nicB), dev("c", -1, nicC)},
			[2][]string{{"a"}, {"b", "c"}}},
		{"no node match: nearest of all", GPU{NUMANode: 2, PCIPath: gpuP},
			[]RDMADevice{dev("b", 0, nicB), dev("c", 1, nicC)},
			[2][]string{{"b"}, {"c"}}},
		{"no paths: same node", GPU{NUMANode: 1},
			[]RDMADevice{dev("a", 0, ""), dev("c", 1, "")},
			[2][]string{{"c"}, {"a"}}},
		{"nothing known: none preferred (upstream)", GPU{NUMANode: -1},
			[]RDMADevice{dev("a", -1, ""), dev("c", -1, "")},
			[2][]string{{}, {"a", "c"}}},
		{"no HCA", GPU{NUMANode: 0, PCIPath: gpuP}, nil, [2][]string{{}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := &Topology{GPUs: []GPU{tc.gpu}, RDMA: tc.hcas}
			got := topo.PriorityMatrix()["cuda:0"]
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("cuda:0 = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPCIDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"/sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0", "/sys/devices/pci0000:00/0000:00:01.0/0000:04:00.0", 0},
		{"/sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0", "/sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0", 2},
		{"/sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0", "/sys/devices/pci0000:80/0000:80:01.0/0000:8a:00.0", 4},
		{"/x/a", "/x/a", 0},
		{"", "/x", -1},
		{"/x", "", -1},
	} {
		if got := pciDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("pciDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestParseMatrix(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want map[string][2][]string
		ok   bool
	}{
		{"upstream", `{"cpu:0": [["mlx5_0"], ["mlx5_1", "mlx5_2"]], "cuda:0": [[], ["mlx5_0"]]}`,
			map[string][2][]string{"cpu:0": {{"mlx5_0"}, {"mlx5_1", "mlx5_2"}}, "cuda:0": {{}, {"mlx5_0"}}}, true},
		{"empty object", `{}`, map[string][2][]string{}, true},
		{"null lists", `{"cpu:0": [null, null]}`, map[string][2][]string{"cpu:0": {{}, {}}}, true},
		{"empty", ``, nil, false},
		{"blank", " \n", nil, false},
		{"null", `null`, nil, false},
		{"not json", `{"cpu:0":`, nil, false},
		{"one list", `{"cpu:0": [["mlx5_0"]]}`, nil, false},
		{"three lists", `{"cpu:0": [[], [], []]}`, nil, false},
		{"not strings", `{"cpu:0": [[1], []]}`, nil, false},
		{"array", `[["a"], ["b"]]`, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMatrix([]byte(tc.in))
			if tc.ok {
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Errorf("ParseMatrix = %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			if !errors.Is(err, ErrInvalidMatrix) {
				t.Errorf("ParseMatrix err = %v, want ErrInvalidMatrix", err)
			}
		})
	}
}

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"0", []int{0}, true},
		{"0-3", []int{0, 1, 2, 3}, true},
		{"8-9,0-1,4", []int{0, 1, 4, 8, 9}, true},
		{"", []int{}, true},
		{"a", nil, false},
		{"3-1", nil, false},
		{"1-", nil, false},
		{"-1", nil, false},
	} {
		got, err := parseCPUList(tc.in)
		if (err == nil) != tc.ok || (tc.ok && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("parseCPUList(%q) = %v, %v", tc.in, got, err)
		}
	}
	if got := formatCPUList([]int{0, 1, 2, 3, 8, 10, 11}); got != "0-3,8,10-11" {
		t.Errorf("formatCPUList = %q", got)
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:3B:00.0": "0000:3b:00.0",
		"0000:3b:00.0":     "0000:3b:00.0",
		"00000001:3B:00.0": "0001:3b:00.0",
		"12340000:3B:00.0": "12340000:3b:00.0", // a domain that does not fit 4 digits is kept
		"3B:00.0":          "3b:00.0",
		"":                 "",
	} {
		if got := normalizeBusID(in); got != want {
			t.Errorf("normalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestChooseCopyRoutine(t *testing.T) {
	for _, tc := range []struct {
		arch     string
		features []string
		want     string
	}{
		{"amd64", []string{"AVX", "AVX2", "AVX512F", "AVX512BW", "ERMS", "FSRM"}, "avx512"},
		{"amd64", []string{"AVX2", "AVX512F", "ERMS"}, "avx2"}, // AVX512F without BW (Knights Landing)
		{"amd64", []string{"AVX2"}, "avx2"},
		{"amd64", []string{"SSE2", "ERMS"}, "erms"},
		{"amd64", []string{"SSE2"}, "sse2"},
		{"386", nil, "generic"},
		{"arm64", []string{"ASIMD", "SVE"}, "sve"},
		{"arm64", []string{"ASIMD"}, "neon"},
		{"arm64", nil, "generic"},
		{"riscv64", []string{"AVX2"}, "generic"},
	} {
		if got := ChooseCopyRoutine(tc.arch, tc.features); got != tc.want {
			t.Errorf("ChooseCopyRoutine(%s, %v) = %q, want %q", tc.arch, tc.features, got, tc.want)
		}
	}
}

func TestDegradedSysfs(t *testing.T) {
	t.Run("missing root", func(t *testing.T) {
		_, err := DiscoverWith(Config{SysfsRoot: filepath.Join(t.TempDir(), "nope"), DisableNVML: true})
		if !errors.Is(err, ErrSysfs) {
			t.Fatalf("err = %v, want ErrSysfs", err)
		}
	})
	t.Run("empty root", func(t *testing.T) {
		topo, err := DiscoverWith(Config{SysfsRoot: t.TempDir(), DisableNVML: true})
		if err != nil {
			t.Fatal(err)
		}
		want := []NUMANode{{ID: 0, CPUs: []int{}, Synthetic: true}}
		if !reflect.DeepEqual(topo.NUMA, want) || len(topo.RDMA) != 0 || len(topo.GPUs) != 0 || topo.RDMA == nil || topo.GPUs == nil {
			t.Errorf("got NUMA %+v RDMA %v GPUs %v", topo.NUMA, topo.RDMA, topo.GPUs)
		}
		m := topo.PriorityMatrix()
		if want := map[string][2][]string{"cpu:0": {{}, {}}}; !reflect.DeepEqual(m, want) {
			t.Errorf("matrix = %v, want %v", m, want)
		}
	})
	t.Run("malformed files", func(t *testing.T) {
		root := t.TempDir()
		node := filepath.Join(root, "devices", "system", "node", "node3")
		if err := os.MkdirAll(node, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(node, "cpulist"), []byte("x-y\n"), 0o644)
		os.WriteFile(filepath.Join(node, "distance"), []byte("10 ?\n"), 0o644)
		ib := filepath.Join(root, "class", "infiniband")
		os.MkdirAll(ib, 0o755)
		os.Symlink("../../devices/gone/infiniband/mlx5_7", filepath.Join(ib, "mlx5_7")) // dangling
		topo, err := DiscoverWith(Config{SysfsRoot: root, DisableNVML: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(topo.Warnings) != 3 {
			t.Errorf("warnings = %q, want 3", topo.Warnings)
		}
		if want := []NUMANode{{ID: 3, CPUs: []int{}}}; !reflect.DeepEqual(topo.NUMA, want) {
			t.Errorf("NUMA = %+v, want %+v", topo.NUMA, want)
		}
		if want := []RDMADevice{{Name: "mlx5_7", NUMANode: -1}}; !reflect.DeepEqual(topo.RDMA, want) {
			t.Errorf("RDMA = %+v, want %+v", topo.RDMA, want)
		}
	})
}

func TestLocationOfFake(t *testing.T) {
	topo := &Topology{procRoot: "testdata/proc"}
	for _, tc := range []struct {
		addr uintptr
		want string
	}{
		{0x55d0c0a00000, "cpu:0"},
		{0x7f3a00001234, "cpu:1"}, // interleaved, most pages on node 1
		{0x7f3a401fffff, "cpu:0"}, // last byte of a bound mapping
		{0x7f3a40200000, "*"},     // just past it: unmapped
		{0x7f3a50000000, "*"},     // mapped, nothing resident
		{0x7ffd1c9e0010, "cpu:1"},
		{0x1000, "*"},
	} {
		if got := topo.LocationOf(tc.addr); got != tc.want {
			t.Errorf("LocationOf(%#x) = %q, want %q", tc.addr, got, tc.want)
		}
	}
	if got := (&Topology{procRoot: t.TempDir()}).LocationOf(0x1000); got != WildcardLocation {
		t.Errorf("LocationOf without procfs = %q", got)
	}
}

func TestLocationOfLive(t *testing.T) {
	if _, err := os.Stat("/proc/self/numa_maps"); err != nil {
		t.Skip("no /proc/self/numa_maps (kernel without NUMA):", err)
	}
	topo, err := DiscoverWith(Config{DisableNVML: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := memory.Map(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := topo.LocationOf(uintptr(r.Addr())); got != WildcardLocation {
		t.Logf("untouched region at %q (expected %q unless pre-faulted)", got, WildcardLocation)
	}
	b := r.Bytes()
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	got := topo.LocationOf(uintptr(r.Addr()) + 4096)
	ok := false
	for _, n := range topo.NUMA {
		ok = ok || got == "cpu:"+strconv.Itoa(n.ID)
	}
	if !ok {
		t.Errorf("LocationOf(touched region) = %q, want cpu:<one of %d nodes>", got, len(topo.NUMA))
	}
}

func TestDiscoverLive(t *testing.T) {
	topo, err := Discover()
	if err != nil {
		t.Fatal(err)
	}
	if topo.NVML == "" {
		t.Error("empty NVML state")
	}
	if topo.CPU.NumCPU <= 0 || topo.CPU.Arch == "" || topo.CPU.CopyRoutine == "" {
		t.Errorf("CPU = %+v", topo.CPU)
	}
	if len(topo.NUMA) == 0 {
		t.Error("no NUMA node")
	}
	m := topo.PriorityMatrix()
	for _, n := range topo.NUMA {
		if _, ok := m["cpu:"+strconv.Itoa(n.ID)]; !ok {
			t.Errorf("matrix lacks cpu:%d", n.ID)
		}
	}
	if _, err := json.Marshal(topo); err != nil {
		t.Fatal(err)
	}
	s := topo.String()
	for _, want := range []string{"CPU:", "NUMA nodes:", "RDMA devices:", "NVML: ", "GPUs:", "Priority matrix"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q", want)
		}
	}
	t.Logf("\n%s", s)
}

func TestStringFake(t *testing.T) {
	s := fakeTopology(t, Config{}).String()
	for _, want := range []string{
		"node0: cpus 0-3,8-11, memory 16 GiB, distances [10 21]",
		"node1: cpus 4-7,12-15, memory 32 GiB, distances [21 10]",
		"mlx5_0: pci 0000:1a:00.0, numa node 0",
		"port 1: 4: ACTIVE, InfiniBand, 200 Gb/sec (4X HDR)",
		"NVML: disabled",
		"cuda:0: NVIDIA 10de:2335, pci 0000:1b:00.0, numa node 0 [sysfs]",
		"  cpu:0: [mlx5_0] | [mlx5_1]\n  cpu:1: [mlx5_1] | [mlx5_0]\n  cuda:0: [mlx5_0] | [mlx5_1]\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
}

func TestByteSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 16 << 30: "16 GiB", 7610773504: "7.1 GiB"} {
		if got := byteSize(n); got != want {
			t.Errorf("byteSize(%d) = %q, want %q", n, got, want)
		}
	}
}
