package topology

// nvmlResult is what one NVML session found (see queryNVML in nvml_cgo.go
// and its pure-Go twin nvml_nocgo.go).
type nvmlResult struct {
	state      string // one of the NVML* states or "error: ..."
	driver     string // driver version
	cudaDriver int    // CUDA driver API version, e.g. 12040
	gpus       []nvmlGPU
}

// nvmlGPU is one device as NVML reports it.
type nvmlGPU struct {
	index  int
	name   string
	uuid   string
	busID  string // NVML form, "00000000:3B:00.0"
	memory uint64 // bytes
}
