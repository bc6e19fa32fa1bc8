//go:build cgo

package topology

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlMu serialises NVML sessions: go-nvml swaps a package-level
// error-string hook when it loads and unloads the library, so two
// concurrent Init/Shutdown pairs on different handles would race on it.
var nvmlMu sync.Mutex

// queryNVML loads libnvidia-ml.so.1 through go-nvml (dlopen via cgo), lists
// the GPUs and shuts NVML down again. A missing library or driver yields
// NVMLNoDriver; any other NVML failure "error: <NVML message>". A panic
// inside go-nvml is recovered and reported as an error state, never
// propagated.
func queryNVML() (r nvmlResult) {
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			r = nvmlResult{state: fmt.Sprintf("error: NVML panicked: %v", p)}
		}
	}()
	lib := nvml.New()
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return nvmlResult{state: NVMLNoDriver}
	default:
		return nvmlResult{state: "error: " + ret.Error()}
	}
	defer lib.Shutdown()
	r.state = NVMLOK
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		r.driver = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		r.cudaDriver = v
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nvmlResult{state: "error: nvmlDeviceGetCount: " + ret.Error()}
	}
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // as upstream: a device that cannot be queried is skipped
		}
		g := nvmlGPU{index: i}
		if v, ret := dev.GetName(); ret == nvml.SUCCESS {
			g.name = v
		}
		if v, ret := dev.GetUUID(); ret == nvml.SUCCESS {
			g.uuid = v
		}
		if p, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
			g.busID = cString(p.BusId[:])
		}
		if m, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.memory = m.Total
		}
		r.gpus = append(r.gpus, g)
	}
	return r
}

// cString converts a NUL-terminated C char array to a string.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
