//go:build !cgo

package topology

// queryNVML is the pure-Go twin of the cgo NVML query: go-nvml needs cgo to
// dlopen libnvidia-ml, so a CGO_ENABLED=0 build reports NVMLNoCgo and
// discovery lists GPUs from sysfs instead.
func queryNVML() nvmlResult { return nvmlResult{state: NVMLNoCgo} }
