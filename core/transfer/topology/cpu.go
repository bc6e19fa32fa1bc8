package topology

import (
	"runtime"
	"sort"

	"github.com/klauspost/cpuid/v2"
)

// CPU describes the processor, from CPUID (github.com/klauspost/cpuid/v2).
type CPU struct {
	// Arch is runtime.GOARCH ("amd64", "arm64", ...).
	Arch string `json:"arch"`
	// Vendor is the raw vendor string ("GenuineIntel", "AuthenticAMD").
	Vendor string `json:"vendor"`
	// Brand is the brand string ("Intel(R) Xeon(R) Platinum ...").
	Brand string `json:"brand"`
	// PhysicalCores is the number of physical cores; 0 when undetectable.
	PhysicalCores int `json:"physical_cores"`
	// LogicalCores is the number of hardware threads CPUID reports; 0 when
	// undetectable.
	LogicalCores int `json:"logical_cores"`
	// ThreadsPerCore is the SMT width (1 when undetectable).
	ThreadsPerCore int `json:"threads_per_core"`
	// NumCPU is runtime.NumCPU(): the CPUs this process may run on.
	NumCPU int `json:"num_cpu"`
	// Family and Model are the CPUID family and model numbers.
	Family int `json:"family"`
	Model  int `json:"model"`
	// CacheLine is the cache line size in bytes; 0 when undetectable.
	CacheLine int `json:"cache_line"`
	// L1D, L2 and L3 are cache sizes in bytes; -1 when undetectable.
	L1D int `json:"l1d_bytes"`
	L2  int `json:"l2_bytes"`
	L3  int `json:"l3_bytes"`
	// Features lists every feature CPUID reports, sorted (cpuid names:
	// "AVX2", "AVX512F", "ERMS", "FSRM", ...).
	Features []string `json:"features"`
	// AVX2 .. FSRM are the features CopyRoutine looks at.
	AVX2     bool `json:"avx2"`
	AVX512F  bool `json:"avx512f"`
	AVX512BW bool `json:"avx512bw"`
	ERMS     bool `json:"erms"` // Enhanced REP MOVSB
	FSRM     bool `json:"fsrm"` // Fast Short REP MOV
	// CopyRoutine is the bulk-copy routine this CPU would favour; see
	// ChooseCopyRoutine. Reported only: copies use Go's copy.
	CopyRoutine string `json:"copy_routine"`
}

// detectCPU reads CPUID once (the cpuid package probes at init).
func detectCPU() CPU {
	c := cpuid.CPU
	cpu := CPU{
		Arch:           runtime.GOARCH,
		Vendor:         c.VendorString,
		Brand:          c.BrandName,
		PhysicalCores:  c.PhysicalCores,
		LogicalCores:   c.LogicalCores,
		ThreadsPerCore: c.ThreadsPerCore,
		NumCPU:         runtime.NumCPU(),
		Family:         c.Family,
		Model:          c.Model,
		CacheLine:      c.CacheLine,
		L1D:            c.Cache.L1D,
		L2:             c.Cache.L2,
		L3:             c.Cache.L3,
		Features:       c.FeatureSet(),
		AVX2:           c.Supports(cpuid.AVX2),
		AVX512F:        c.Supports(cpuid.AVX512F),
		AVX512BW:       c.Supports(cpuid.AVX512BW),
		ERMS:           c.Supports(cpuid.ERMS),
		FSRM:           c.Supports(cpuid.FSRM),
	}
	if cpu.Features == nil {
		cpu.Features = []string{}
	}
	sort.Strings(cpu.Features)
	cpu.CopyRoutine = ChooseCopyRoutine(cpu.Arch, cpu.Features)
	return cpu
}

// ChooseCopyRoutine picks the name of the widest bulk-copy routine the
// features allow. On amd64: "avx512" (AVX512F and AVX512BW), "avx2",
// "erms" (REP MOVSB fast path), else "sse2" (the amd64 baseline). On
// arm64: "sve", "neon" (ASIMD), else "generic". Other architectures:
// "generic". features uses cpuid's names (CPU.Features). The choice is
// advisory: it mirrors the memcpy variant upstream's TCP/loopback paths
// would get from glibc's ifunc dispatch, for reporting only.
func ChooseCopyRoutine(arch string, features []string) string {
	has := func(name string) bool {
		for _, f := range features {
			if f == name {
				return true
			}
		}
		return false
	}
	switch arch {
	case "amd64", "386":
		switch {
		case has("AVX512F") && has("AVX512BW"):
			return "avx512"
		case has("AVX2"):
			return "avx2"
		case has("ERMS"):
			return "erms"
		case arch == "amd64":
			return "sse2"
		}
	case "arm64":
		switch {
		case has("SVE"):
			return "sve"
		case has("ASIMD"):
			return "neon"
		}
	}
	return "generic"
}
