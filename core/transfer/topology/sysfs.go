package topology

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// sysfs reads the parts of a sysfs tree discovery needs. Paths are relative
// to root; warn records a part that could not be read.
type sysfs struct {
	root string
	warn func(format string, args ...any)
}

func (s sysfs) path(rel ...string) string {
	return filepath.Join(append([]string{s.root}, rel...)...)
}

// readString returns the trimmed contents of a file under root, or "" and
// false when it does not exist or cannot be read.
func (s sysfs) readString(rel ...string) (string, bool) {
	b, err := os.ReadFile(s.path(rel...))
	if err != nil {
		return "", false
	}
	return string(bytes.TrimSpace(b)), true
}

// readInt reads a decimal integer file, returning def when absent or
// malformed.
func (s sysfs) readInt(def int, rel ...string) int {
	v, ok := s.readString(rel...)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		s.warn("%s: %q is not an integer", filepath.Join(rel...), v)
		return def
	}
	return n
}

// numaNodes lists devices/system/node/nodeN directories, as upstream's
// discoverCpuTopology. Without that directory a synthetic node 0 stands in.
func (s sysfs) numaNodes() []NUMANode {
	ents, err := os.ReadDir(s.path("devices", "system", "node"))
	if err != nil {
		return []NUMANode{{ID: 0, CPUs: []int{}, Synthetic: true}}
	}
	var nodes []NUMANode
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, "node") {
			continue
		}
		id, err := strconv.Atoi(name[len("node"):])
		if err != nil || id < 0 {
			continue
		}
		n := NUMANode{ID: id, CPUs: []int{}}
		if v, ok := s.readString("devices", "system", "node", name, "cpulist"); ok {
			cpus, err := parseCPUList(v)
			if err != nil {
				s.warn("%s/cpulist: %v", name, err)
			} else {
				n.CPUs = cpus
			}
		}
		if b, err := os.ReadFile(s.path("devices", "system", "node", name, "meminfo")); err == nil {
			n.MemoryBytes = parseMemTotal(b)
		}
		if v, ok := s.readString("devices", "system", "node", name, "distance"); ok {
			for _, f := range strings.Fields(v) {
				d, err := strconv.Atoi(f)
				if err != nil {
					s.warn("%s/distance: %q is not an integer", name, f)
					n.Distances = nil
					break
				}
				n.Distances = append(n.Distances, d)
			}
		}
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return []NUMANode{{ID: 0, CPUs: []int{}, Synthetic: true}}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	return nodes
}

// parseCPUList parses the kernel's list format ("0-3,8-11,16").
func parseCPUList(s string) ([]int, error) {
	cpus := []int{}
	if s == "" {
		return cpus, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad cpu list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	sort.Ints(cpus)
	return cpus, nil
}

// parseMemTotal returns the MemTotal line of a node's meminfo in bytes
// ("Node 0 MemTotal:  16384 kB"), or 0.
func parseMemTotal(b []byte) uint64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// Node <n> MemTotal: <v> kB
		if len(f) >= 4 && f[2] == "MemTotal:" {
			v, err := strconv.ParseUint(f[3], 10, 64)
			if err != nil {
				return 0
			}
			if len(f) >= 5 && f[4] == "kB" {
				v *= 1024
			}
			return v
		}
	}
	return 0
}

// rdmaDevices lists class/infiniband/*. The PCI device is the directory two
// levels above the resolved device directory (upstream resolves
// "/sys/class/infiniband/<dev>/../.." with realpath).
func (s sysfs) rdmaDevices() []RDMADevice {
	ents, err := os.ReadDir(s.path("class", "infiniband"))
	if err != nil {
		return nil // no RDMA stack: not an error
	}
	var devs []RDMADevice
	for _, e := range ents {
		d := RDMADevice{Name: e.Name(), NUMANode: -1}
		dir, err := filepath.EvalSymlinks(s.path("class", "infiniband", d.Name))
		if err != nil {
			s.warn("rdma device %s: %v", d.Name, err)
			devs = append(devs, d)
			continue
		}
		pci := filepath.Dir(filepath.Dir(dir))
		d.PCIBusID = filepath.Base(pci)
		if rel, err := filepath.Rel(s.root, pci); err == nil {
			d.PCIPath = filepath.ToSlash(rel)
		}
		if v, err := os.ReadFile(filepath.Join(pci, "numa_node")); err == nil {
			if n, err := strconv.Atoi(string(bytes.TrimSpace(v))); err == nil {
				d.NUMANode = n
			}
		}
		d.Ports = s.ports(dir)
		devs = append(devs, d)
	}
	return devs
}

// ports reads <dev>/ports/<n>/{state,link_layer,rate}.
func (s sysfs) ports(dir string) []Port {
	ents, err := os.ReadDir(filepath.Join(dir, "ports"))
	if err != nil {
		return nil
	}
	var ports []Port
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p := Port{Num: n}
		read := func(f string) string {
			b, _ := os.ReadFile(filepath.Join(dir, "ports", e.Name(), f))
			return string(bytes.TrimSpace(b))
		}
		p.State, p.LinkLayer, p.Rate = read("state"), read("link_layer"), read("rate")
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i].Num < ports[j].Num })
	return ports
}

// pciLocation returns the NUMA node (-1 when unknown) and the resolved
// device directory (relative to root, "" when unresolvable) of a PCI device.
func (s sysfs) pciLocation(busID string) (numa int, pciPath string) {
	if busID == "" {
		return -1, ""
	}
	numa = s.readInt(-1, "bus", "pci", "devices", busID, "numa_node")
	if dir, err := filepath.EvalSymlinks(s.path("bus", "pci", "devices", busID)); err == nil {
		if rel, err := filepath.Rel(s.root, dir); err == nil {
			pciPath = filepath.ToSlash(rel)
		}
	}
	return numa, pciPath
}

// pciGPUs lists NVIDIA display-class PCI devices (vendor 0x10de, class
// 0x0300 VGA or 0x0302 3D controller) in bus id order. Used when NVML is
// unavailable.
func (s sysfs) pciGPUs() []GPU {
	ents, err := os.ReadDir(s.path("bus", "pci", "devices"))
	if err != nil {
		return []GPU{}
	}
	gpus := []GPU{}
	for _, e := range ents { // ReadDir sorts by name, i.e. by bus id
		id := e.Name()
		vendor, _ := s.readString("bus", "pci", "devices", id, "vendor")
		class, _ := s.readString("bus", "pci", "devices", id, "class")
		if !strings.EqualFold(vendor, "0x10de") || !(strings.HasPrefix(class, "0x0300") || strings.HasPrefix(class, "0x0302")) {
			continue
		}
		dev, _ := s.readString("bus", "pci", "devices", id, "device")
		g := GPU{Index: len(gpus), Name: "NVIDIA " + strings.TrimPrefix(vendor, "0x") + ":" + strings.TrimPrefix(dev, "0x"), PCIBusID: id, Source: SourceSysfs}
		g.NUMANode, g.PCIPath = s.pciLocation(id)
		gpus = append(gpus, g)
	}
	return gpus
}

// normalizeBusID turns NVML's / CUDA's bus id ("00000000:3B:00.0") into
// sysfs form ("0000:3b:00.0"): lower case, a 4-digit domain.
func normalizeBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	dom, rest, ok := strings.Cut(id, ":")
	if !ok || strings.Count(rest, ":") != 1 {
		return id
	}
	if len(dom) > 4 && strings.TrimLeft(dom[:len(dom)-4], "0") == "" {
		dom = dom[len(dom)-4:]
	}
	return dom + ":" + rest
}
