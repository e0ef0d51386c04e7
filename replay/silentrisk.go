package replay

import "fmt"

// SilentRisk is the silent-OOM rule at one moment of a process, shared by
// the forecast (replayed moments) and fragsim's monitor (live ones): the
// process is at risk while the device's free memory is below what its
// memory outside the allocator may still ask for at once (the reserve),
// as the allocator's cache does not give memory back to the driver on
// its own.
type SilentRisk struct {
	// FreeBytes is the device's free memory; ReserveBytes what the
	// process's outside memory may still ask for (OutsideModel.ReserveBytes).
	FreeBytes, ReserveBytes uint64
	// The process's allocator: its reserved bytes, its cached-free bytes
	// (reserved − active) and, of those, the releasable bytes in wholly
	// free segments (what empty_cache() returns).
	ReservedBytes, CachedFreeBytes, ReleasableBytes uint64
	// DeviceTotalBytes is the base of set_per_process_memory_fraction (0:
	// unknown).
	DeviceTotalBytes uint64
}

// AtRisk reports whether the device's free memory is below the reserve.
func (r SilentRisk) AtRisk() bool { return r.FreeBytes < r.ReserveBytes }

// MarginBytes is the device's free memory less the reserve: negative
// while at risk.
func (r SilentRisk) MarginBytes() int64 { return int64(r.FreeBytes) - int64(r.ReserveBytes) }

// CapBytes is the cache cap that removes the risk: the reserved bytes less
// the shortfall, rounded down to the 2 MiB large segments are asked in (0
// when no risk, or when the shortfall is all the cache).
func (r SilentRisk) CapBytes() uint64 {
	if !r.AtRisk() {
		return 0
	}
	short := r.ReserveBytes - r.FreeBytes
	if r.ReservedBytes <= short {
		return 0
	}
	return (r.ReservedBytes - short) / segmentGranularity * segmentGranularity
}

// Remedy names what reduces the risk, in one clause list: empty_cache()
// (or a garbage-collection threshold) with what it returns, the cache cap
// as a memory fraction, and loading the kernels eagerly.
func (r SilentRisk) Remedy() string {
	capB := r.CapBytes()
	capping := "cap its cache at " + FormatBytes(capB)
	switch {
	case capB == 0 && r.AtRisk():
		capping = fmt.Sprintf("capping its cache cannot cover the %s short (it holds %s)",
			FormatBytes(r.ReserveBytes-r.FreeBytes), FormatBytes(r.ReservedBytes))
	case r.DeviceTotalBytes > 0 && capB > 0:
		capping += fmt.Sprintf(" (set_per_process_memory_fraction(%.4f) of %s)", float64(capB)/float64(r.DeviceTotalBytes),
			FormatBytes(r.DeviceTotalBytes))
	}
	return fmt.Sprintf("torch.cuda.empty_cache() then (or a garbage_collection_threshold) returns %s of its %s cached free; "+
		"%s; CUDA_MODULE_LOADING=EAGER loads the kernels before the caches fill",
		FormatBytes(r.ReleasableBytes), FormatBytes(r.CachedFreeBytes), capping)
}
