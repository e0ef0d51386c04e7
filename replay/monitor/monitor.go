package monitor

import (
	"fmt"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// Layout is what a monitor reads of an allocator's segments on one
// device. Add them one by one.
type Layout struct {
	Segments       int
	ReservedBytes  uint64 // the segments' bytes
	ActiveBytes    uint64 // blocks not free: allocated, or waiting for their free to complete
	AllocatedBytes uint64
	// CachedFreeBytes is the free blocks' bytes, LargestFreeBytes the
	// largest of them.
	CachedFreeBytes  uint64
	LargestFreeBytes uint64
	// StrandedBytes are free bytes in segments that hold live blocks
	// (empty_cache() cannot return them); ReleasableBytes those of wholly
	// free segments (it can).
	StrandedBytes   uint64
	ReleasableBytes uint64
}

// Add counts the segment s.
func (l *Layout) Add(s trace.Segment) {
	l.Segments++
	l.ReservedBytes += s.SizeBytes
	var free uint64
	live := false
	for _, b := range s.Blocks {
		switch b.State {
		case trace.BlockInactive:
			free += b.SizeBytes
			l.LargestFreeBytes = max(l.LargestFreeBytes, b.SizeBytes)
		case trace.BlockAllocated:
			l.AllocatedBytes += b.SizeBytes
			live = true
		default:
			live = true
		}
	}
	if len(s.Blocks) == 0 { // a segment listed without its blocks: one free block
		free = s.SizeBytes
		l.LargestFreeBytes = max(l.LargestFreeBytes, free)
	}
	l.CachedFreeBytes += free
	l.ActiveBytes += s.SizeBytes - min(free, s.SizeBytes)
	if live {
		l.StrandedBytes += free
	} else {
		l.ReleasableBytes += free
	}
}

// Counters are what the allocator counts itself
// (torch.cuda.memory_stats()); a monitor takes the figures from the
// layout where the allocator keeps no counters.
type Counters struct {
	ReservedBytes      uint64 // reserved_bytes.all.current
	AllocatedBytes     uint64 // allocated_bytes.all.current
	InactiveSplitBytes uint64 // inactive_split_bytes.all.current
	OOMs               uint64 // num_ooms
	AllocRetries       uint64 // num_alloc_retries
}

// Peak is the allocator's state where its reserved bytes peaked, for an
// exporter that sees every allocation (the recording hook's model).
type Peak struct {
	ReservedBytes, ActiveBytes uint64
}

// Sample is one device of a process at one moment, as the process reads it.
type Sample struct {
	TimeNS int64 // Unix time in nanoseconds
	Device int
	Layout Layout
	// Counters, when not nil, are the allocator's own.
	Counters *Counters
	// DeviceFreeBytes and DeviceTotalBytes are the device's memory
	// (torch.cuda.mem_get_info, cuMemGetInfo); a total of 0: not known.
	DeviceFreeBytes, DeviceTotalBytes uint64
	// HeldBytes is the device memory the process's allocator holds, when
	// it is not the reserved bytes (the recording hook serves from a pool
	// of its own while it models PyTorch's allocator); nil: the reserved
	// bytes.
	HeldBytes *uint64
	// Peak, when not nil, is the exact peak; else the monitor takes the
	// sample with the most reserved bytes so far.
	Peak *Peak
}

// Gauges are the figures of one device at one moment: what Metrics export.
type Gauges struct {
	TimeNS           int64
	Device           int
	DeviceKnown      bool // the device's free and total memory are known
	DeviceTotalBytes uint64

	ReservedBytes, AllocatedBytes, InactiveSplitBytes uint64
	LargestFreeBlockBytes, CachedFreeBytes            uint64
	FragmentationRatio                                float64
	AtPeakPct                                         float64
	OutsideAllocatorBytes, DeviceFreeBytes            uint64
	SilentOOMRisk                                     int // 0 or 1
	SilentOOMMarginBytes                              int64
	OOMs, AllocRetries                                uint64

	// Risk is the silent-OOM rule's state; RiskCrossed is set when the
	// risk turned on at this moment (it was off, or unknown, before).
	Risk        replay.SilentRisk
	RiskCrossed bool
}

// Options configure a Monitor.
type Options struct {
	// ReserveBytes is what the memory outside the allocator may still ask
	// for at once; 0: replay.DefaultOutsideReserveBytes, the forecast's.
	ReserveBytes uint64
}

// Monitor turns samples into gauges, keeping per device what spans
// samples: the peak and whether the risk was on. Not safe for concurrent
// use.
type Monitor struct {
	reserve uint64
	devs    map[int]*devState
}

type devState struct {
	peak      uint64
	atPeakPct float64
	risk      bool
}

// New returns a Monitor.
func New(o Options) *Monitor {
	if o.ReserveBytes == 0 {
		o.ReserveBytes = replay.DefaultOutsideReserveBytes
	}
	return &Monitor{reserve: o.ReserveBytes, devs: map[int]*devState{}}
}

// ReserveBytes is the reserve the risk is judged against.
func (m *Monitor) ReserveBytes() uint64 { return m.reserve }

// Observe returns the gauges of s.
func (m *Monitor) Observe(s Sample) Gauges {
	st := m.devs[s.Device]
	if st == nil {
		st = &devState{}
		m.devs[s.Device] = st
	}
	l := &s.Layout
	g := Gauges{TimeNS: s.TimeNS, Device: s.Device, ReservedBytes: l.ReservedBytes, AllocatedBytes: l.AllocatedBytes,
		InactiveSplitBytes: l.StrandedBytes, LargestFreeBlockBytes: l.LargestFreeBytes, CachedFreeBytes: l.CachedFreeBytes}
	if c := s.Counters; c != nil {
		g.ReservedBytes, g.AllocatedBytes, g.InactiveSplitBytes = c.ReservedBytes, c.AllocatedBytes, c.InactiveSplitBytes
		g.OOMs, g.AllocRetries = c.OOMs, c.AllocRetries
	}
	if l.CachedFreeBytes > 0 {
		g.FragmentationRatio = 1 - float64(l.LargestFreeBytes)/float64(l.CachedFreeBytes)
	}
	switch {
	case s.Peak != nil:
		st.atPeakPct = fragPct(s.Peak.ReservedBytes, s.Peak.ActiveBytes)
	case l.ReservedBytes > st.peak:
		st.peak, st.atPeakPct = l.ReservedBytes, fragPct(l.ReservedBytes, l.ActiveBytes)
	}
	g.AtPeakPct = st.atPeakPct
	if s.DeviceTotalBytes == 0 {
		st.risk = false // unknown: a later risk is a crossing
		return g
	}
	g.DeviceKnown, g.DeviceTotalBytes, g.DeviceFreeBytes = true, s.DeviceTotalBytes, s.DeviceFreeBytes
	held := g.ReservedBytes
	if s.HeldBytes != nil {
		held = *s.HeldBytes
	}
	if used := held + s.DeviceFreeBytes; used < s.DeviceTotalBytes {
		g.OutsideAllocatorBytes = s.DeviceTotalBytes - used
	}
	g.Risk = replay.SilentRisk{FreeBytes: s.DeviceFreeBytes, ReserveBytes: m.reserve, ReservedBytes: g.ReservedBytes,
		CachedFreeBytes: l.CachedFreeBytes, ReleasableBytes: l.ReleasableBytes, DeviceTotalBytes: s.DeviceTotalBytes}
	g.SilentOOMMarginBytes = g.Risk.MarginBytes()
	risk := g.Risk.AtRisk()
	if risk {
		g.SilentOOMRisk = 1
	}
	g.RiskCrossed = risk && !st.risk
	st.risk = risk
	return g
}

// fragPct is 100·(1 − active/reserved), 0 for an empty allocator.
func fragPct(reserved, active uint64) float64 {
	if reserved == 0 || active >= reserved {
		return 0
	}
	return 100 * (1 - float64(active)/float64(reserved))
}

// Warning is the line to print when the risk turns on: the margin and
// what reduces the risk ("" when not at risk).
func (g *Gauges) Warning() string {
	if g.SilentOOMRisk == 0 {
		return ""
	}
	return fmt.Sprintf("silent OOM risk on device %d: device free %s < the %s its memory outside the allocator "+
		"may still need at once (margin %s; %s outside the allocator), which the allocator does not see; reduce it: %s",
		g.Device, replay.FormatBytes(g.DeviceFreeBytes), replay.FormatBytes(g.Risk.ReserveBytes),
		signedBytes(g.SilentOOMMarginBytes), replay.FormatBytes(g.OutsideAllocatorBytes), g.Risk.Remedy())
}

func signedBytes(n int64) string {
	if n < 0 {
		return "-" + replay.FormatBytes(uint64(-n))
	}
	return replay.FormatBytes(uint64(n))
}

// Record is one device's gauges at one moment as `fragsim monitor` writes
// them and fragsim.monitor logs them, one JSON object a line. Its keys are
// stable: add, never rename.
type Record struct {
	TimeNS           int64  `json:"time_ns"`
	Device           int    `json:"device"`
	DeviceTotalBytes uint64 `json:"device_total_bytes,omitempty"`
	// Metrics holds each metric's value by name (those of Metrics; the
	// device's are left out while its memory is not known).
	Metrics map[string]float64 `json:"metrics"`
	// RiskCrossed is set when the silent-OOM risk turned on at this
	// moment; Warning is then the line to print. Remedy names what reduces
	// the risk while it is on.
	RiskCrossed bool   `json:"risk_crossed,omitempty"`
	Warning     string `json:"warning,omitempty"`
	Remedy      string `json:"remedy,omitempty"`
}

// Record returns g as a Record.
func (g *Gauges) Record() Record {
	r := Record{TimeNS: g.TimeNS, Device: g.Device, DeviceTotalBytes: g.DeviceTotalBytes,
		Metrics: make(map[string]float64, len(Metrics)), RiskCrossed: g.RiskCrossed}
	for _, m := range Metrics {
		if m.Device && !g.DeviceKnown {
			continue
		}
		r.Metrics[m.Name] = m.Value(g)
	}
	if g.SilentOOMRisk != 0 {
		r.Remedy = g.Risk.Remedy()
		if g.RiskCrossed {
			r.Warning = g.Warning()
		}
	}
	return r
}
