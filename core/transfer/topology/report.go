package topology

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// String is a human-readable, multi-line report of t (for `mooncake
// info`): CPU, NUMA nodes, RDMA devices, NVML state and GPUs, the priority
// matrix, and warnings. The format is for people; use encoding/json on t
// (and on PriorityMatrix) for machines.
func (t *Topology) String() string {
	var b strings.Builder
	c := t.CPU
	fmt.Fprintf(&b, "CPU: %s %q (%s, family %d model %d)\n", orNone(c.Vendor), c.Brand, c.Arch, c.Family, c.Model)
	fmt.Fprintf(&b, "  cores: %d physical, %d logical, %d threads/core; %d usable by this process\n", c.PhysicalCores, c.LogicalCores, c.ThreadsPerCore, c.NumCPU)
	fmt.Fprintf(&b, "  caches: line %d B, L1d %s, L2 %s, L3 %s\n", c.CacheLine, cacheSize(c.L1D), cacheSize(c.L2), cacheSize(c.L3))
	fmt.Fprintf(&b, "  copy: AVX2=%t AVX512F=%t AVX512BW=%t ERMS=%t FSRM=%t -> copy routine %q (reported; copies use Go's copy)\n",
		c.AVX2, c.AVX512F, c.AVX512BW, c.ERMS, c.FSRM, c.CopyRoutine)
	fmt.Fprintf(&b, "  features (%d): %s\n", len(c.Features), strings.Join(c.Features, " "))

	fmt.Fprintf(&b, "NUMA nodes: %d (sysfs %s)\n", len(t.NUMA), t.SysfsRoot)
	for _, n := range t.NUMA {
		syn := ""
		if n.Synthetic {
			syn = " (synthetic: no NUMA information in sysfs)"
		}
		fmt.Fprintf(&b, "  node%d: cpus %s, memory %s", n.ID, formatCPUList(n.CPUs), byteSize(n.MemoryBytes))
		if len(n.Distances) > 0 {
			fmt.Fprintf(&b, ", distances %v", n.Distances)
		}
		fmt.Fprintf(&b, "%s\n", syn)
	}

	fmt.Fprintf(&b, "RDMA devices: %d\n", len(t.RDMA))
	for _, d := range t.RDMA {
		fmt.Fprintf(&b, "  %s: pci %s, numa node %d\n", d.Name, orNone(d.PCIBusID), d.NUMANode)
		for _, p := range d.Ports {
			fmt.Fprintf(&b, "    port %d: %s, %s, %s\n", p.Num, orNone(p.State), orNone(p.LinkLayer), orNone(p.Rate))
		}
	}

	fmt.Fprintf(&b, "NVML: %s", t.NVML)
	if t.DriverVersion != "" {
		fmt.Fprintf(&b, " (driver %s", t.DriverVersion)
		if t.CUDADriverVersion > 0 {
			fmt.Fprintf(&b, ", CUDA %d.%d", t.CUDADriverVersion/1000, t.CUDADriverVersion%1000/10)
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, "\nGPUs: %d\n", len(t.GPUs))
	for _, g := range t.GPUs {
		fmt.Fprintf(&b, "  cuda:%d: %s, pci %s, numa node %d", g.Index, g.Name, orNone(g.PCIBusID), g.NUMANode)
		if g.MemoryBytes > 0 {
			fmt.Fprintf(&b, ", memory %s", byteSize(g.MemoryBytes))
		}
		if g.UUID != "" {
			fmt.Fprintf(&b, ", %s", g.UUID)
		}
		fmt.Fprintf(&b, " [%s]\n", g.Source)
	}

	m := t.PriorityMatrix()
	locs := make([]string, 0, len(m))
	for k := range m {
		locs = append(locs, k)
	}
	sort.Slice(locs, func(i, j int) bool { return locationLess(locs[i], locs[j]) })
	b.WriteString("Priority matrix (location: preferred | other):\n")
	for _, l := range locs {
		e := m[l]
		fmt.Fprintf(&b, "  %s: [%s] | [%s]\n", l, strings.Join(e[0], " "), strings.Join(e[1], " "))
	}
	for _, w := range t.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	return b.String()
}

// locationLess orders "cpu:N" before "cuda:N", numerically within a kind.
func locationLess(a, b string) bool {
	ka, ia, _ := strings.Cut(a, ":")
	kb, ib, _ := strings.Cut(b, ":")
	if ka != kb {
		return ka < kb
	}
	na, ea := strconv.Atoi(ia)
	nb, eb := strconv.Atoi(ib)
	if ea != nil || eb != nil {
		return a < b
	}
	return na < nb
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func cacheSize(n int) string {
	if n < 0 {
		return "?"
	}
	return byteSize(uint64(n))
}

// byteSize formats n with a binary unit ("7.1 GiB", "48 KiB", "512 B").
func byteSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + string("KMGTPE"[exp]) + "iB"
}

// formatCPUList writes cpus back in the kernel's list form ("0-3,8").
func formatCPUList(cpus []int) string {
	if len(cpus) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i])+"-"+strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
