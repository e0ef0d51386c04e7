package replay

import (
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// Config configures one replay.
type Config struct {
	// CapacityBytes is the device memory. 0 takes the trace header's GPU
	// total, or no limit when the header has none.
	CapacityBytes uint64
	// Fraction is the per-process memory fraction (0 or 1: no cap). The
	// trace's own set_fraction events change it as the replay goes.
	Fraction float64
	// OutsideBytes is device memory held outside the allocator (CUDA
	// context, cuBLAS workspaces, other processes).
	OutsideBytes uint64
	// EmptyCacheEvery injects an empty_cache after every N allocations (0: off).
	EmptyCacheEvery int64
	// DefragThresholdPct injects an empty_cache whenever 100·(1−active/reserved)
	// passes this value (0: off): the classic defrag(threshold) loop.
	DefragThresholdPct float64
	// Observer, when set, is called after every event with the state then.
	// The Sample is reused: copy it to keep it.
	Observer func(s *Sample)
	// Progress, when set, is called now and then with the events done.
	Progress func(events int64)

	// noFraction ignores every memory fraction (MinCapacity sizes the
	// device itself).
	noFraction bool
}

// Sample is the replayed state after one event.
type Sample struct {
	Index          int64 // event index in the trace
	TimeNS         int64
	Event          trace.Event
	ReservedBytes  uint64
	ActiveBytes    uint64
	AllocatedBytes uint64
	RequestedBytes uint64
	Policy         driver.Policy // the device's policy, for Stats and Inspector
	// Block is the replayed block of the event, as the policy handed it
	// out, when HasBlock: the block an alloc was served, or the block a
	// free_requested or free_completed returns. An alloc the policy could
	// not serve, a free of such an alloc and other events have none.
	Block    driver.Block
	HasBlock bool

	ds *devState // the event's device, for Replayed
}

// Replayed returns the replayed block of the live block recorded at addr on
// the sample's device, with its requested bytes: the block an alloc at addr
// was served, or that the initial state's block at addr became. ok is false
// once the block's free has completed. Valid during the Observer call only.
func (s *Sample) Replayed(addr uint64) (b driver.Block, requestedBytes uint64, ok bool) {
	if s.ds == nil {
		return driver.Block{}, 0, false
	}
	l, ok := s.ds.live.Get(addr)
	if !ok {
		return driver.Block{}, 0, false
	}
	return l.block(), l.req, true
}

// Result is what a replay measured. JSON keys are stable: add, never rename.
type Result struct {
	Policy             string        `json:"policy"`
	Conf               string        `json:"conf,omitempty"`
	Events             int64         `json:"events"`
	Allocs             int64         `json:"allocs"`
	PeakReservedBytes  uint64        `json:"peak_reserved_bytes"`
	FinalReservedBytes uint64        `json:"final_reserved_bytes"`
	PeakActiveBytes    uint64        `json:"peak_active_bytes"`
	PeakAllocatedBytes uint64        `json:"peak_allocated_bytes"`
	PeakRequestedBytes uint64        `json:"peak_requested_bytes"`
	DeviceAllocs       int64         `json:"device_allocs"`
	DeviceFrees        int64         `json:"device_frees"`
	AllocRetries       int64         `json:"alloc_retries"`
	OOMs               int64         `json:"ooms"`
	Fragmentation      Fragmentation `json:"fragmentation"`
	Fidelity           Fidelity      `json:"fidelity"`
	OOMEvents          []OOM         `json:"oom_events,omitempty"`
	MinCapacityBytes   uint64        `json:"min_capacity_bytes,omitempty"`
}

// Fragmentation holds a replay's views of fragmentation (docs/metrics.md
// defines each).
type Fragmentation struct {
	AtPeakPct        float64 `json:"at_peak_pct"`
	PeakRatioPct     float64 `json:"peak_ratio_pct"`
	TimeWeightedPct  float64 `json:"time_weighted_pct"`
	ExternalPct      float64 `json:"external_pct"`
	InternalBytes    uint64  `json:"internal_bytes"`
	StrandedBytes    uint64  `json:"stranded_bytes"`
	MaxStrandedBytes uint64  `json:"max_stranded_bytes"`
	OverheadRatio    float64 `json:"overhead_ratio"`
	PeakIndex        int64   `json:"peak_index"` // event index where reserved peaked
}

// Fidelity compares a replay with the real allocator's recorded events.
type Fidelity struct {
	Checked                 bool   `json:"checked"`
	Allocs                  int64  `json:"allocs"`
	AllocsAtRecordedAddress int64  `json:"allocs_at_recorded_address"`
	DeviceEvents            int64  `json:"device_events"`
	DeviceEventsMatched     int64  `json:"device_events_matched"`
	FirstMismatch           string `json:"first_mismatch,omitempty"`
}

// OOM is a request the replay could not serve, with its context.
type OOM struct {
	Index            int64          `json:"index"`
	TimeNS           int64          `json:"time_ns"`
	Device           trace.DeviceID `json:"device"`
	Stream           trace.StreamID `json:"stream"`
	SizeBytes        uint64         `json:"size_bytes"`
	ReservedBytes    uint64         `json:"reserved_bytes"`
	FreeCachedBytes  uint64         `json:"free_cached_bytes"`
	LargestFreeBytes uint64         `json:"largest_free_bytes"`
	StrandedBytes    uint64         `json:"stranded_bytes"`
	// Fragmentation is true when free cached bytes could have served the
	// request but no free block fits and the device had no more memory.
	Fragmentation bool `json:"fragmentation"`
}
