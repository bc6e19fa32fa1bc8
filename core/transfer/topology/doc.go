// Package topology discovers the hardware a transfer engine runs on and
// builds upstream Mooncake's NIC priority matrix from it (spec §1.7).
//
// Discover reports:
//
//   - the CPU (vendor, brand, core counts, cache sizes, instruction-set
//     features via github.com/klauspost/cpuid/v2) and a CopyRoutine choice
//     ("avx512", "avx2", "erms", "sse2", "sve", "neon" or "generic"). The
//     choice is only reported, for `mooncake info` and benchmarks: every copy
//     in this module uses Go's copy (runtime memmove), which already picks
//     AVX/ERMS paths itself;
//   - the NUMA nodes, from <SysfsRoot>/devices/system/node/node*/{cpulist,
//     meminfo,distance}, as upstream's discoverCpuTopology;
//   - the RDMA devices (HCAs), from <SysfsRoot>/class/infiniband/*: name,
//     PCI bus id (the directory two levels above the resolved device
//     directory, as upstream's listInfiniBandDevices), NUMA node and port
//     state. Upstream lists devices with ibv_get_device_list; reading sysfs
//     gives the same names without cgo;
//   - the GPUs, from NVML (github.com/NVIDIA/go-nvml) when libnvidia-ml
//     loads. NVML needs cgo (go-nvml dlopens through cgo), so that part is
//     built only with cgo; without cgo, or without a driver, GPUs are listed
//     from sysfs (PCI vendor 0x10de, display class) instead, and the NVML
//     field says why ("no NVIDIA driver", "unsupported: built without cgo").
//     Each GPU's NUMA node comes from <SysfsRoot>/bus/pci/devices/<bus
//     id>/numa_node.
//
// PriorityMatrix builds the matrix upstream publishes in its segment
// descriptor and reads from MC_CUSTOM_TOPO_JSON: for each memory location
// ("cpu:N", "cuda:N") the preferred HCAs and the other usable HCAs. Its
// JSON encoding is upstream's ({"cpu:0": [["mlx5_0"], ["mlx5_1"]]});
// ParseMatrix reads that form back. The matrix is a pure function of the
// discovered Topology, so tests build it from a fake sysfs tree
// (testdata/sysfs) or from hand-written Topology values.
//
// Selector implements upstream's per-slice path choice on such a matrix
// (spec §1.7): a first attempt picks one of the preferred devices of the
// buffer's location, at random or round-robin (MC_PATH_ROUNDROBIN); retry
// k walks preferred then other devices, index (k-1) mod their count; a
// location the matrix lacks falls back to the wildcard entry "*" (every
// device, see Resolve); PickRemote does the same on a peer's matrix, with
// optional destination-device affinity (MC_ENABLE_DEST_DEVICE_AFFINITY).
// It draws from an injected rand.Source, so tests are deterministic.
//
// Discovery is I/O at the edge (practice 1): it reads files under a
// configurable SysfsRoot and ProcRoot, and NVML. A missing or unreadable
// optional part (no InfiniBand class, no NUMA directory, no NVML) is not an
// error: it is recorded in the Topology (empty lists, the NVML state,
// Warnings). Discover fails only when SysfsRoot itself cannot be read.
//
// Concurrency: a Topology is a plain value; its methods only read it and are
// safe for concurrent use. A Selector is safe for concurrent use. Discover may be called from several goroutines;
// each call loads and shuts down its own NVML handle.
package topology
