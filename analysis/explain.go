package analysis

// The explanation of one out-of-memory failure: how much of it was
// fragmentation, real exhaustion, or memory outside the allocator, and
// which setting would have let the run so far fit on the device.

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// OOMClass names what an out-of-memory failure comes from.
type OOMClass string

const (
	// OOMFragmentation: the cache's free bytes were enough for the
	// request, but no free block was.
	OOMFragmentation OOMClass = "fragmentation"
	// OOMOutside: the request exceeded the cache's free bytes, and the
	// memory held outside the allocator would have covered the shortfall.
	OOMOutside OOMClass = "outside"
	// OOMExhaustion: everything else; the memory was in use.
	OOMExhaustion OOMClass = "exhaustion"
)

// ClassifyOOM returns the class of a failed request of requestBytes, from
// the allocator's cached free bytes and its largest free block at the
// failure, and the device memory outside the allocator (device total −
// reserved − device free) when outsideKnown:
//
//   - fragmentation: cachedFree ≥ request > largestFree;
//   - outside: request > cachedFree and outside ≥ request − cachedFree;
//   - exhaustion: everything else.
func ClassifyOOM(requestBytes, cachedFreeBytes, largestFreeBytes, outsideBytes uint64, outsideKnown bool) OOMClass {
	switch {
	case cachedFreeBytes >= requestBytes && requestBytes > largestFreeBytes:
		return OOMFragmentation
	case requestBytes > cachedFreeBytes && outsideKnown && outsideBytes >= requestBytes-cachedFreeBytes:
		return OOMOutside
	}
	return OOMExhaustion
}

// ErrNoRequest means the failed request's size is not known: the trace has
// no oom event and ExplainOptions.RequestBytes is 0.
var ErrNoRequest = errors.New("the failed request's size is not known: the trace has no oom event")

// ExplainOptions configures Explain. The zero value explains the trace's
// last oom event with the device figures its header and that event carry.
type ExplainOptions struct {
	// RequestBytes is the failed request; 0: the size of the trace's last
	// oom event (PyTorch's rounded request).
	RequestBytes uint64
	// DeviceTotalBytes and DeviceFreeBytes are the device's memory at the
	// failure (torch.cuda.mem_get_info); 0: unknown. The total defaults to
	// the header's GPU total, the free bytes to the last oom event's.
	DeviceTotalBytes, DeviceFreeBytes uint64
	// CapBytes is the process's memory cap (fraction × device total); 0:
	// the header's memory fraction of the device total, else none.
	CapBytes uint64
	// Device is the device whose failure is explained; nil: the last oom
	// event's, else the only device of the trace.
	Device *trace.DeviceID
	// Parallel, Progress and Name are as in CompareOptions, for the
	// comparison that finds Fit.
	Parallel int
	Progress func(events int64, runsDone, runs int)
	Name     string
	// NoFit skips the recommendation for fit (Explanation.Fit), which
	// replays the candidates: for a caller that compares them itself.
	NoFit bool
}

// Explanation is what Explain found. Its JSON keys are stable: add, never
// rename.
type Explanation struct {
	// The allocator at the failure, on the failing device: the bytes its
	// segments hold, those in allocated blocks, those in free (cached)
	// blocks, and the largest free block.
	ReservedBytes         uint64 `json:"reserved_bytes"`
	AllocatedBytes        uint64 `json:"allocated_bytes"`
	CachedFreeBytes       uint64 `json:"cached_free_bytes"`
	LargestFreeBlockBytes uint64 `json:"largest_free_block_bytes"`
	RequestBytes          uint64 `json:"request_bytes"`
	// OutsideBytes is the device memory outside the allocator (device
	// total − reserved − device free), nil when the device figures are
	// not known.
	OutsideBytes *uint64  `json:"outside_bytes,omitempty"`
	Class        OOMClass `json:"class"`
	// Fit is, for a trace with events, the recommendation for the goal
	// fit:FitBytes (the memory cap, else the device total less the memory
	// outside the allocator): the cheapest setting under which the run so
	// far, the failed request included, fits. nil for a state alone or
	// when the device's size is unknown.
	Fit *Recommendation `json:"fit,omitempty"`

	// Device is the failing device; History is set when the trace has
	// events (the figures are then a replay's, at AtEvent); AtOOM when
	// that is an oom event (else the end of the trace).
	Device  trace.DeviceID `json:"-"`
	History bool           `json:"-"`
	AtOOM   bool           `json:"-"`
	AtEvent int64          `json:"-"`
	// RequestGiven is set when the request came from the options.
	RequestGiven bool `json:"-"`
	// DeviceTotalBytes and DeviceFreeBytes are the device figures used (0:
	// unknown); FitBytes the size Fit was asked for, FitNote why there is
	// no Fit for a trace with events.
	DeviceTotalBytes uint64 `json:"-"`
	DeviceFreeBytes  uint64 `json:"-"`
	FitBytes         uint64 `json:"-"`
	FitNote          string `json:"-"`
	fitWhat          string // what FitBytes is
	// Truncated says what was lost when the trace was cut short.
	Truncated string `json:"-"`
}

// Explain explains the failed request of the trace: for a state-only
// snapshot, from its state; for a trace with events, from PyTorch's
// caching allocator replayed under the trace's settings, at its last oom
// event (or its end), with the recommendation for fitting the device made
// by Compare, as `compare --goal fit:SIZE` makes it. An unknown request
// is ErrNoRequest.
func Explain(open Opener, opts ExplainOptions) (*Explanation, error) {
	h, err := readHeader(open)
	if err != nil {
		return nil, err
	}
	x := &Explanation{}
	var oomFree uint64
	var haveOOMFree bool
	var segs []trace.Segment
	at, err := replayToOOM(open, h, opts)
	if err != nil {
		return nil, err
	}
	if at.events > 0 {
		x.History, x.AtOOM, x.AtEvent, x.Device, segs = true, at.oom, at.index, at.device, at.segs
		x.Truncated = at.truncated
		if at.oom {
			x.RequestBytes, oomFree, haveOOMFree = at.request, at.deviceFree, true
		}
	} else if StateOnly(h, 0) {
		if x.Device, segs, err = stateDevice(h, opts.Device); err != nil {
			return nil, err
		}
	}
	if opts.RequestBytes > 0 {
		x.RequestBytes, x.RequestGiven = opts.RequestBytes, true
	}
	if x.RequestBytes == 0 {
		return nil, ErrNoRequest
	}
	x.measure(segs)

	x.DeviceTotalBytes, x.DeviceFreeBytes = opts.DeviceTotalBytes, opts.DeviceFreeBytes
	if x.DeviceTotalBytes == 0 {
		x.DeviceTotalBytes = h.GPUTotalBytes
	}
	freeKnown := x.DeviceFreeBytes > 0
	if !freeKnown && haveOOMFree {
		x.DeviceFreeBytes, freeKnown = oomFree, true
	}
	if x.DeviceTotalBytes > 0 && freeKnown {
		out := uint64(0)
		if used := x.ReservedBytes + x.DeviceFreeBytes; used < x.DeviceTotalBytes {
			out = x.DeviceTotalBytes - used
		}
		x.OutsideBytes = &out
	}
	var outside uint64
	if x.OutsideBytes != nil {
		outside = *x.OutsideBytes
	}
	x.Class = ClassifyOOM(x.RequestBytes, x.CachedFreeBytes, x.LargestFreeBlockBytes, outside, x.OutsideBytes != nil)
	if x.History && !opts.NoFit {
		if err := x.fit(open, h, opts); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// measure sets the allocator's figures from its segments.
func (x *Explanation) measure(segs []trace.Segment) {
	for _, s := range segs {
		x.ReservedBytes += s.SizeBytes
		for _, b := range s.Blocks {
			switch b.State {
			case trace.BlockInactive:
				x.CachedFreeBytes += b.SizeBytes
				x.LargestFreeBlockBytes = max(x.LargestFreeBlockBytes, b.SizeBytes)
			case trace.BlockAllocated:
				x.AllocatedBytes += b.SizeBytes
			}
		}
	}
}

// stateDevice returns the segments of a state-only snapshot on the device
// dev asks for (nil: the only one).
func stateDevice(h *trace.Header, dev *trace.DeviceID) (trace.DeviceID, []trace.Segment, error) {
	byDev := map[trace.DeviceID][]trace.Segment{}
	for _, s := range h.Initial.Segments {
		byDev[s.Device] = append(byDev[s.Device], s)
	}
	if dev != nil {
		return *dev, byDev[*dev], nil
	}
	if len(byDev) > 1 {
		return 0, nil, fmt.Errorf("the snapshot holds %d devices: say which one failed", len(byDev))
	}
	for d, segs := range byDev {
		return d, segs, nil
	}
	return 0, nil, nil
}

// oomState is the replayed allocator at the explained moment.
type oomState struct {
	events     int64
	oom        bool
	index      int64
	device     trace.DeviceID
	request    uint64
	deviceFree uint64
	segs       []trace.Segment
	truncated  string
}

// replayToOOM replays the trace under PyTorch's caching allocator with the
// trace's settings and keeps the state after its last oom event on the
// device asked for, else the state at the end.
func replayToOOM(open Opener, h *trace.Header, opts ExplainOptions) (*oomState, error) {
	f, err := allocator.NewFactory(allocator.BaselineFacts().Name, "", h)
	if err != nil {
		return nil, err
	}
	r, c, err := open()
	if err != nil {
		return nil, err
	}
	if c != nil {
		defer c.Close()
	}
	st := &oomState{}
	last := map[trace.DeviceID]driver.Policy{}
	var lastDev trace.DeviceID
	cfg := replay.Config{CapacityBytes: opts.DeviceTotalBytes}
	cfg.Observer = func(s *replay.Sample) {
		dev := s.Event.Device
		last[dev], lastDev = s.Policy, dev
		if s.Event.Kind != trace.KindOOM || opts.Device != nil && *opts.Device != dev {
			return
		}
		st.oom, st.index, st.device = true, s.Index, dev
		st.request, st.deviceFree = s.Event.SizeBytes, s.Event.Aux
		st.segs = segmentsOf(s.Policy)
	}
	res, err := replay.Run(r, f, cfg)
	if err != nil {
		if res == nil || !errors.Is(err, trace.ErrTruncated) {
			return nil, err
		}
		st.truncated = err.Error()
	}
	if res != nil {
		st.events = res.Events
	}
	if st.events == 0 || st.oom {
		return st, nil
	}
	st.device = lastDev
	if opts.Device != nil {
		st.device = *opts.Device
	}
	st.index = st.events - 1
	st.segs = segmentsOf(last[st.device])
	return st, nil
}

// segmentsOf lists a policy's segments (none when it cannot list them).
func segmentsOf(p driver.Policy) []trace.Segment {
	in, ok := p.(driver.Inspector)
	if !ok {
		return nil
	}
	var segs []trace.Segment
	in.Segments(func(s trace.Segment) bool {
		segs = append(segs, s)
		return true
	})
	return segs
}

// fit finds the recommendation for fitting the memory cap, else the
// device's memory less what was held outside the allocator (the room the
// allocator had), else the device total, as compare --goal fit:SIZE does.
func (x *Explanation) fit(open Opener, h *trace.Header, opts ExplainOptions) error {
	capBytes := opts.CapBytes
	if capBytes == 0 && h.MemoryFraction > 0 && h.MemoryFraction < 1 && x.DeviceTotalBytes > 0 {
		capBytes = uint64(h.MemoryFraction * float64(x.DeviceTotalBytes)) // PyTorch's cap
	}
	x.FitBytes, x.fitWhat = x.DeviceTotalBytes, "the device total"
	if x.OutsideBytes != nil {
		x.FitBytes -= min(x.FitBytes, *x.OutsideBytes)
		x.fitWhat = "the device total less the memory outside the allocator"
	}
	cfg := replay.Config{CapacityBytes: x.DeviceTotalBytes}
	if capBytes > 0 && (x.FitBytes == 0 || capBytes < x.FitBytes) {
		x.FitBytes, x.fitWhat = capBytes, "the memory cap"
		if x.DeviceTotalBytes > 0 && h.MemoryFraction == 0 {
			cfg.Fraction = float64(capBytes) / float64(x.DeviceTotalBytes)
		}
	}
	if x.FitBytes == 0 {
		x.FitNote = "the device's memory is not known: give its total for the setting that fits"
		return nil
	}
	goal, err := ParseGoal("fit:" + strconv.FormatUint(x.FitBytes, 10))
	if err != nil {
		return err
	}
	cmp, err := Compare(open, CompareOptions{Config: cfg, Goal: goal, Parallel: opts.Parallel,
		Progress: opts.Progress, Name: opts.Name})
	if err != nil {
		return err
	}
	if cmp.Decision != nil {
		x.Fit = cmp.Decision.Recommendation
	}
	return nil
}

// Lines describes the failure in at most four lines: the request, the
// cache, the class with its figures, and the setting that fits.
func (x *Explanation) Lines() []string {
	where := "as given"
	if !x.RequestGiven && x.AtOOM {
		where = "the trace's last oom event"
	}
	lines := []string{
		fmt.Sprintf("OOM: a request of %s on device %d failed (%s)", FmtBytes(x.RequestBytes), x.Device, where),
		fmt.Sprintf("Cache: %s reserved, %s allocated, %s free in PyTorch's cache; largest free block %s",
			FmtBytes(x.ReservedBytes), FmtBytes(x.AllocatedBytes), FmtBytes(x.CachedFreeBytes),
			FmtBytes(x.LargestFreeBlockBytes)),
		x.classLine(),
	}
	switch {
	case x.Fit != nil:
		lines = append(lines, fmt.Sprintf("Fit in %s (%s): %s", FmtBytes(x.FitBytes), x.fitWhat, x.Fit.Line))
	case x.FitNote != "":
		lines = append(lines, "Fit: none computed: "+x.FitNote)
	case !x.History:
		lines = append(lines, "Fit: a state alone has no what-if; "+
			"record the history (torch.cuda.memory._record_memory_history) for the setting that fits")
	}
	return lines
}

// classLine says how much of the shortfall is fragmentation, exhaustion
// or memory outside the allocator.
func (x *Explanation) classLine() string {
	out := "memory outside the allocator unknown (give the device's total and free memory)"
	if x.OutsideBytes != nil {
		out = FmtBytes(*x.OutsideBytes) + " outside the allocator (device total − reserved − free)"
	}
	switch x.Class {
	case OOMFragmentation:
		return fmt.Sprintf("Fragmentation: the cache held %s free, enough for the request, but no block was "+
			"(largest %s, %s short); %s", FmtBytes(x.CachedFreeBytes), FmtBytes(x.LargestFreeBlockBytes),
			FmtBytes(x.RequestBytes-x.LargestFreeBlockBytes), out)
	case OOMOutside:
		return fmt.Sprintf("Outside memory: the request exceeds the cache's %s free by %s, which the %s would have covered",
			FmtBytes(x.CachedFreeBytes), FmtBytes(x.RequestBytes-x.CachedFreeBytes), out)
	}
	if x.RequestBytes > x.CachedFreeBytes {
		return fmt.Sprintf("Exhaustion: the request exceeds the cache's %s free by %s; %s",
			FmtBytes(x.CachedFreeBytes), FmtBytes(x.RequestBytes-x.CachedFreeBytes), out)
	}
	return fmt.Sprintf("Exhaustion: the cache held %s free and a free block of %s, yet none served the request "+
		"(another pool or stream, or a block max_split_size_mb keeps whole); %s",
		FmtBytes(x.CachedFreeBytes), FmtBytes(x.LargestFreeBlockBytes), out)
}
