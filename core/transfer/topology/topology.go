package topology

import (
	"errors"
	"fmt"
	"os"
	"sort"
)

// ErrSysfs is returned by Discover when the sysfs root cannot be read at all.
var ErrSysfs = errors.New("topology: sysfs not readable")

// ErrInvalidMatrix is returned by ParseMatrix for a document that is not an
// upstream priority matrix (upstream: ERR_MALFORMED_JSON).
var ErrInvalidMatrix = errors.New("topology: invalid priority matrix")

// NVML states reported in Topology.NVML.
const (
	// NVMLOK means libnvidia-ml loaded, nvmlInit succeeded and GPUs were
	// listed from NVML.
	NVMLOK = "ok"
	// NVMLNoDriver means libnvidia-ml.so.1 could not be loaded or the
	// kernel driver is not loaded (NVML_ERROR_LIBRARY_NOT_FOUND,
	// NVML_ERROR_DRIVER_NOT_LOADED).
	NVMLNoDriver = "no NVIDIA driver"
	// NVMLNoCgo means this binary was built with CGO_ENABLED=0; go-nvml
	// needs cgo to dlopen the library.
	NVMLNoCgo = "unsupported: built without cgo"
	// NVMLDisabled means Config.DisableNVML was set.
	NVMLDisabled = "disabled"
)

// GPU sources reported in GPU.Source.
const (
	// SourceNVML marks a GPU listed by NVML (index = NVML index).
	SourceNVML = "nvml"
	// SourceSysfs marks a GPU found by scanning PCI devices in sysfs
	// (index = position in PCI bus id order).
	SourceSysfs = "sysfs"
)

// Config configures discovery. The zero value discovers the real machine.
type Config struct {
	// SysfsRoot is the sysfs mount point; default "/sys". Tests point it at
	// a fake tree.
	SysfsRoot string
	// ProcRoot is the procfs mount point used by LocationOf; default
	// "/proc".
	ProcRoot string
	// Filter, when non-empty, keeps only the RDMA devices named in it
	// (upstream MC_TE_FILTERS: the allow-list applied in
	// listInfiniBandDevices).
	Filter []string
	// Exclude drops the RDMA devices named in it (upstream
	// MC_TE_FILTERS_EXCLUDE).
	Exclude []string
	// DisableNVML skips NVML; GPUs are then listed from sysfs. Tests set it
	// so results do not depend on the machine's GPUs.
	DisableNVML bool
}

// Topology is what Discover found. The JSON field names are stable (for
// `mooncake info --json`).
type Topology struct {
	// SysfsRoot is the sysfs root that was read.
	SysfsRoot string `json:"sysfs_root"`
	// CPU describes the processor this process runs on.
	CPU CPU `json:"cpu"`
	// NUMA lists the NUMA nodes by id. When the kernel exposes no NUMA
	// directory a single synthetic node 0 is reported (upstream would
	// report no cpu entry at all; see NUMANode.Synthetic).
	NUMA []NUMANode `json:"numa_nodes"`
	// RDMA lists the RDMA devices (HCAs) sorted by name, after Filter and
	// Exclude.
	RDMA []RDMADevice `json:"rdma_devices"`
	// NVML is the NVML state: NVMLOK, NVMLNoDriver, NVMLNoCgo,
	// NVMLDisabled, or "error: <NVML error string>".
	NVML string `json:"nvml"`
	// DriverVersion is the NVIDIA driver version from NVML, when NVML is ok.
	DriverVersion string `json:"driver_version,omitempty"`
	// CUDADriverVersion is the CUDA version the driver supports, as
	// NVML's nvmlSystemGetCudaDriverVersion (e.g. 12040 for 12.4); 0 when
	// unknown.
	CUDADriverVersion int `json:"cuda_driver_version,omitempty"`
	// GPUs lists the GPUs by index; cuda:N in the matrix is GPUs[N].
	GPUs []GPU `json:"gpus"`
	// Warnings lists the parts that could not be read (malformed files,
	// unresolvable links); discovery went on without them.
	Warnings []string `json:"warnings,omitempty"`

	procRoot string // for LocationOf
}

// NUMANode is one NUMA node.
type NUMANode struct {
	// ID is the node number (the N of nodeN).
	ID int `json:"id"`
	// CPUs lists the logical CPUs of the node, ascending (from cpulist).
	CPUs []int `json:"cpus"`
	// MemoryBytes is the node's MemTotal in bytes (from meminfo); 0 when
	// unknown.
	MemoryBytes uint64 `json:"memory_bytes"`
	// Distances are the ACPI SLIT distances from this node to node 0, 1,
	// ... (from the distance file; 10 = local).
	Distances []int `json:"distances,omitempty"`
	// Synthetic is true for the single node 0 reported when sysfs has no
	// NUMA directory.
	Synthetic bool `json:"synthetic,omitempty"`
}

// RDMADevice is one RDMA device (HCA) as listed under class/infiniband.
type RDMADevice struct {
	// Name is the verbs device name (e.g. "mlx5_0").
	Name string `json:"name"`
	// PCIBusID is the device's PCI address in sysfs form
	// ("0000:1a:00.0"); empty when the link could not be resolved.
	PCIBusID string `json:"pci_bus_id"`
	// NUMANode is the node from the PCI device's numa_node; -1 when the
	// platform does not say (as upstream).
	NUMANode int `json:"numa_node"`
	// PCIPath is the resolved PCI device directory relative to SysfsRoot
	// ("devices/pci0000:00/0000:00:01.0/0000:1a:00.0"); used for PCI
	// distance to GPUs.
	PCIPath string `json:"pci_path,omitempty"`
	// Ports lists the device's ports.
	Ports []Port `json:"ports,omitempty"`
}

// Port is one port of an RDMA device.
type Port struct {
	// Num is the port number (upstream MC_IB_PORT defaults to 1).
	Num int `json:"num"`
	// State is the sysfs state text (e.g. "4: ACTIVE").
	State string `json:"state,omitempty"`
	// LinkLayer is "InfiniBand" or "Ethernet" (RoCE).
	LinkLayer string `json:"link_layer,omitempty"`
	// Rate is the sysfs rate text (e.g. "200 Gb/sec (4X HDR)").
	Rate string `json:"rate,omitempty"`
}

// GPU is one GPU.
type GPU struct {
	// Index is the N of "cuda:N": the NVML index (PCI bus order), or the
	// position in PCI bus id order when listed from sysfs. It equals CUDA's
	// device ordinal under CUDA_DEVICE_ORDER=PCI_BUS_ID without
	// CUDA_VISIBLE_DEVICES (upstream uses CUDA's ordinal).
	Index int `json:"index"`
	// Name is the product name from NVML; for sysfs GPUs "NVIDIA
	// <vendor:device id>".
	Name string `json:"name"`
	// UUID is the NVML UUID ("GPU-..."); empty for sysfs GPUs.
	UUID string `json:"uuid,omitempty"`
	// PCIBusID is the PCI address in sysfs form ("0000:1b:00.0"; NVML's
	// 8-digit upper-case domain form is normalised).
	PCIBusID string `json:"pci_bus_id"`
	// NUMANode is the node from /sys/bus/pci/devices/<bus id>/numa_node;
	// -1 when unknown.
	NUMANode int `json:"numa_node"`
	// MemoryBytes is the total device memory from NVML; 0 when unknown.
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// PCIPath is the resolved PCI device directory relative to SysfsRoot.
	PCIPath string `json:"pci_path,omitempty"`
	// Source is SourceNVML or SourceSysfs.
	Source string `json:"source"`
}

// Discover discovers this machine with the default Config (sysfs at /sys,
// NVML enabled, no device filter). See DiscoverWith.
func Discover() (*Topology, error) { return DiscoverWith(Config{}) }

// DiscoverWith discovers the machine described by cfg. It never panics on
// a missing driver or device: absent parts are empty and noted in NVML or
// Warnings. Errors: ErrSysfs (wrapped, naming the path) when cfg.SysfsRoot
// cannot be read.
func DiscoverWith(cfg Config) (*Topology, error) {
	if cfg.SysfsRoot == "" {
		cfg.SysfsRoot = "/sys"
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if _, err := os.ReadDir(cfg.SysfsRoot); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSysfs, cfg.SysfsRoot, err)
	}
	t := &Topology{SysfsRoot: cfg.SysfsRoot, procRoot: cfg.ProcRoot}
	t.CPU = detectCPU()
	s := sysfs{root: cfg.SysfsRoot, warn: func(format string, args ...any) {
		t.Warnings = append(t.Warnings, fmt.Sprintf(format, args...))
	}}
	t.NUMA = s.numaNodes()
	t.RDMA = filterDevices(s.rdmaDevices(), cfg.Filter, cfg.Exclude)

	if cfg.DisableNVML {
		t.NVML = NVMLDisabled
	} else {
		r := queryNVML()
		t.NVML, t.DriverVersion, t.CUDADriverVersion = r.state, r.driver, r.cudaDriver
		for _, g := range r.gpus {
			busID := normalizeBusID(g.busID)
			gpu := GPU{Index: g.index, Name: g.name, UUID: g.uuid, PCIBusID: busID, MemoryBytes: g.memory, Source: SourceNVML}
			gpu.NUMANode, gpu.PCIPath = s.pciLocation(busID)
			t.GPUs = append(t.GPUs, gpu)
		}
	}
	if t.NVML != NVMLOK {
		t.GPUs = s.pciGPUs()
	}
	if t.RDMA == nil {
		t.RDMA = []RDMADevice{}
	}
	if t.GPUs == nil {
		t.GPUs = []GPU{}
	}
	return t, nil
}

// filterDevices applies upstream's allow-list (MC_TE_FILTERS) then the
// deny-list (MC_TE_FILTERS_EXCLUDE).
func filterDevices(devs []RDMADevice, allow, deny []string) []RDMADevice {
	in := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	out := devs[:0]
	for _, d := range devs {
		if len(allow) > 0 && !in(allow, d.Name) {
			continue
		}
		if in(deny, d.Name) {
			continue
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
