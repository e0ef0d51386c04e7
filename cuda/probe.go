package cuda

import (
	"errors"
	"strconv"
)

// ProbeGranularity is the step, in bytes, of the largest-block search.
const ProbeGranularity = 2 << 20

// ProbeResult is a device's memory as the driver sees it right now.
type ProbeResult struct {
	Device      int    `json:"device"`
	GPUName     string `json:"gpu_name"`
	CUDAVersion string `json:"cuda_version"`
	// FreeBytes and TotalBytes are cuMemGetInfo's, with the probe's own
	// context created.
	FreeBytes  uint64 `json:"free_bytes"`
	TotalBytes uint64 `json:"total_bytes"`
	// LargestBlockBytes is the largest single cuMemAlloc that succeeded,
	// to ProbeGranularity; each block was freed at once.
	LargestBlockBytes uint64 `json:"largest_block_bytes"`
	// Attempts is the number of allocations the search made.
	Attempts int `json:"attempts"`
}

// ErrNoCgo is returned by Probe in a fragsim built with CGO_ENABLED=0.
var ErrNoCgo = errors.New("fragsim was built without cgo; probe needs it (rebuild with CGO_ENABLED=1)")

// cudaVersion formats a driver API version (12040 -> "12.4").
func cudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return strconv.Itoa(v/1000) + "." + strconv.Itoa(v%1000/10)
}
