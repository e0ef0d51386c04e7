package analysis

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// CostPoint is the time one device call takes at a size.
type CostPoint struct {
	Bytes uint64
	Us    float64
}

// DeviceCost is the time an allocator's device calls take on one GPU:
// cudaMalloc and cudaFree by segment size, and the map and unmap of one
// physical page of an expandable segment (cuMemCreate + cuMemMap +
// cuMemSetAccess; cuMemUnmap + cuMemRelease). Between measured sizes the
// time is interpolated linearly; beyond the largest it grows with the
// last interval's slope.
type DeviceCost struct {
	GPU    string
	Malloc []CostPoint // by Bytes, ascending
	Free   []CostPoint
	// MapPageUs and UnmapPageUs are per page of PageBytes (PyTorch maps
	// expandable segments in pages of 2 MiB in the small pool, 20 MiB in
	// the large one; the driver's cost per page is the same for both).
	MapPageUs, UnmapPageUs float64
}

// H200Cost was measured on one NVIDIA H200 (driver 580.159.04, CUDA 13.0) by
// bench/devcost/devcost.py: the median of 50 calls of each kind on an idle
// device (bench/devcost/h200.json).
var H200Cost = DeviceCost{
	GPU: "NVIDIA H200",
	Malloc: []CostPoint{
		{2 << 20, 48.4}, {20 << 20, 47.0}, {64 << 20, 54.0}, {256 << 20, 62.0}, {1 << 30, 184.5}, {4 << 30, 604.2},
	},
	Free: []CostPoint{
		{2 << 20, 39.1}, {20 << 20, 54.9}, {64 << 20, 96.8}, {256 << 20, 191.5}, {1 << 30, 672.1}, {4 << 30, 2962.5},
	},
	MapPageUs:   49.4,
	UnmapPageUs: 39.8,
}

// interp returns the time at n bytes on the curve pts.
func interp(pts []CostPoint, n uint64) float64 {
	if len(pts) == 0 {
		return 0
	}
	if n <= pts[0].Bytes || len(pts) == 1 {
		return pts[0].Us
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].Bytes >= n })
	if i == len(pts) {
		i = len(pts) - 1
	}
	a, b := pts[i-1], pts[i]
	return a.Us + (b.Us-a.Us)*(float64(n)-float64(a.Bytes))/(float64(b.Bytes)-float64(a.Bytes))
}

// MallocUs is the time of one cudaMalloc of n bytes.
func (c *DeviceCost) MallocUs(n uint64) float64 { return interp(c.Malloc, n) }

// FreeUs is the time of one cudaFree of a segment of n bytes.
func (c *DeviceCost) FreeUs(n uint64) float64 { return interp(c.Free, n) }

// AllocatorCost is the estimated time a replay's device calls take.
type AllocatorCost struct {
	GPU string `json:"gpu"` // whose per-call times
	// Calls counts the device calls, one for each cudaMalloc (refused
	// ones too), cudaFree, map and unmap of an expandable segment: the
	// replay's device calls, plus its refused cudaMallocs.
	Calls  int64   `json:"calls"`
	Pages  int64   `json:"pages"`  // pages the maps and unmaps took (each page its own driver calls)
	Ms     float64 `json:"ms"`     // their estimated total time
	Mapped bool    `json:"mapped"` // the policy maps pages (expandable segments)
}

// String is "115 calls, 5.6 ms", or "103 calls (1,204 pages), 6.5 ms"
// for a policy that maps pages.
func (a AllocatorCost) String() string {
	if a.Pages > 0 {
		return fmt.Sprintf("%s calls (%s pages), %.1f ms", fmtCount(a.Calls), fmtCount(a.Pages), a.Ms)
	}
	return fmt.Sprintf("%s calls, %.1f ms", fmtCount(a.Calls), a.Ms)
}

// costDevice counts the time of every call a policy makes of its device.
type costDevice struct {
	driver.Device
	cost  *DeviceCost
	pages func(n uint64) uint64 // the policy's Facts.MapPages; nil: one page a map
	acc   *AllocatorCost
}

func (d costDevice) add(us float64, pages int64) {
	d.acc.Ms += us / 1000
	d.acc.Calls++
	d.acc.Pages += pages
}

// pagesOf is the pages a map or unmap of n bytes takes.
func (d costDevice) pagesOf(n uint64) uint64 {
	if d.pages == nil {
		return 1
	}
	return d.pages(n)
}

func (d costDevice) Malloc(n uint64, s trace.StreamID) (uint64, bool) {
	a, ok := d.Device.Malloc(n, s)
	d.add(d.cost.MallocUs(n), 0) // a refused cudaMalloc costs a call too
	return a, ok
}

func (d costDevice) Free(addr, n uint64) {
	d.Device.Free(addr, n)
	d.add(d.cost.FreeUs(n), 0)
}

func (d costDevice) Map(addr, n uint64) bool {
	ok := d.Device.Map(addr, n)
	d.acc.Mapped = true
	if ok {
		p := d.pagesOf(n)
		d.add(float64(p)*d.cost.MapPageUs, int64(p))
	}
	return ok
}

func (d costDevice) Unmap(addr, n uint64) {
	d.Device.Unmap(addr, n)
	p := d.pagesOf(n)
	d.add(float64(p)*d.cost.UnmapPageUs, int64(p))
}

// costFractionDevice also passes SetFraction on, for devices that take it.
type costFractionDevice struct {
	costDevice
	fs driver.FractionSetter
}

func (d costFractionDevice) SetFraction(f float64) { d.fs.SetFraction(f) }

// costFactory wraps f so that the device calls of every policy it builds
// are priced with cost into acc, the pages of each map and unmap counted
// by pages (the policy's Facts.MapPages; nil: one page each).
func costFactory(f driver.Factory, cost *DeviceCost, pages func(n uint64) uint64, acc *AllocatorCost) driver.Factory {
	acc.GPU = cost.GPU
	return func(dev driver.Device, h *trace.Header) (driver.Policy, error) {
		cd := costDevice{Device: dev, cost: cost, pages: pages, acc: acc}
		if fs, ok := dev.(driver.FractionSetter); ok {
			return f(costFractionDevice{cd, fs}, h)
		}
		return f(cd, h)
	}
}

// CostVerdict weighs the verdict's fix by what it costs in time: the
// estimated time of the device calls before and after, and, when the trace
// header carries them (tags wall_<arm>_s, written by the workload scripts
// in traces/workloads), the wall times measured on the GPU under PyTorch's
// native allocator and under the fix.
type CostVerdict struct {
	Before AllocatorCost `json:"before"`
	After  AllocatorCost `json:"after"`
	// DeltaMs is After.Ms − Before.Ms.
	DeltaMs float64 `json:"delta_ms"`
	// MeasuredBeforeS and MeasuredAfterS are the measured wall times (0 when
	// the header has none); MeasuredArm names the header's arm for after.
	MeasuredBeforeS float64 `json:"measured_before_s,omitempty"`
	MeasuredAfterS  float64 `json:"measured_after_s,omitempty"`
	MeasuredArm     string  `json:"measured_arm,omitempty"`
	// Agree reports whether the estimate and the measurement change in the
	// same direction (set only with a measurement).
	Agree *bool `json:"agree,omitempty"`
}

// costVerdict fills the cost comparison of the verdict's before and after.
func (c *Comparison) costVerdict(h *trace.Header) *CostVerdict {
	b, a := c.Run(c.Before), c.Run(c.After)
	if b == nil || a == nil || b.Cost == nil || a.Cost == nil || !b.OK() || !a.OK() || a == b {
		return nil
	}
	v := &CostVerdict{Before: *b.Cost, After: *a.Cost, DeltaMs: a.Cost.Ms - b.Cost.Ms}
	if h == nil {
		return v
	}
	wall := func(arm string) float64 {
		x, err := strconv.ParseFloat(h.Tags["wall_"+arm+"_s"], 64)
		if err != nil || x <= 0 {
			return 0
		}
		return x
	}
	if arm := measuredArm(a); arm != "" && measuredArm(b) == "native" {
		if wb, wa := wall("native"), wall(arm); wb > 0 && wa > 0 {
			v.MeasuredBeforeS, v.MeasuredAfterS, v.MeasuredArm = wb, wa, arm
			agree := (v.DeltaMs >= 0) == (wa >= wb)
			v.Agree = &agree
		}
	}
	return v
}

// Line is the verdict's cost line.
func (v *CostVerdict) Line() string {
	s := fmt.Sprintf("Allocator cost (estimated): %s after, %s before (%+.1f ms at %s per-call times)",
		v.After, v.Before, v.DeltaMs, v.After.GPU)
	if v.Agree != nil {
		d := 100 * (v.MeasuredAfterS/v.MeasuredBeforeS - 1)
		s += fmt.Sprintf("; measured on the GPU: %.3f s with %s against %.3f s native (%+.1f%%), ",
			v.MeasuredAfterS, v.MeasuredArm, v.MeasuredBeforeS, d)
		if *v.Agree {
			s += "the same direction"
		} else {
			s += "the opposite direction"
		}
	}
	return s
}
