package replay

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// DefaultContextOverheadBytes is the device memory each process holds
// outside its allocator when co-hosted: its CUDA context (a few hundred
// MiB on recent GPUs and drivers, more with lazy module loading off) and
// the cuBLAS/cuDNN workspaces. 500 MiB is a typical H100/H200 figure for a
// PyTorch process; measure yours with nvidia-smi minus
// torch.cuda.memory_reserved().
const DefaultContextOverheadBytes = 500 << 20

// Process is one trace co-hosted on the device: a separate process with its
// own allocator.
type Process struct {
	// Name labels the process in reports (e.g. the trace file's name).
	Name string
	// Open opens the trace; Cohost calls it once per run (MinCapacity
	// runs many).
	Open func() (*trace.Reader, io.Closer, error)
	// Factory builds the process's policy.
	Factory driver.Factory
	// Conf is the policy configuration, reported only.
	Conf string
	// OffsetNS delays the process's start: its first timestamped event
	// happens at OffsetNS on the merged clock.
	OffsetNS int64
	// Scale stretches the process's time (2: twice as slow, 0.5: twice
	// as fast); 0 means 1.
	Scale float64
	// Config holds the process's own replay settings (Fraction,
	// EmptyCacheEvery, DefragThresholdPct); its CapacityBytes,
	// OutsideBytes, Observer and Progress are ignored.
	Config Config
}

// CohostConfig configures a co-hosted replay.
type CohostConfig struct {
	// CapacityBytes is the device memory the processes share (0: unlimited).
	CapacityBytes uint64
	// ContextOverheadBytes is held outside the allocator by each process
	// (taken as given: 0 is none; the command line defaults to
	// DefaultContextOverheadBytes).
	ContextOverheadBytes uint64
	// SharedClock keeps the traces' recorded clocks (traces recorded at
	// the same time, e.g. processes that really shared a GPU): time 0 is
	// the earliest first timestamp of all traces and each trace keeps its
	// distance to it (plus its offset, times its scale). Otherwise each
	// trace starts at its own offset.
	SharedClock bool
	// Forecast computes each process's silent-OOM forecast.
	Forecast bool
	// ForecastPoints bounds each forecast's series (0: DefaultForecastPoints).
	ForecastPoints int
	// Outside models each process's memory outside its allocator for the
	// forecast's silent-OOM risk (the zero value: DefaultOutsideModel).
	// Traces with device_mem samples replace the model by what they
	// measured: the device's memory less the free bytes, the processes'
	// reserved bytes and what the capacity leaves to others. The replay
	// itself charges ContextOverheadBytes only, as before.
	Outside OutsideModel
	// Progress, when set, is called now and then with the events done.
	Progress func(events int64)

	noFraction bool // ignore memory fractions (CohostMinCapacity)
}

// CohostResult is what a co-hosted replay measured. JSON keys are stable:
// add, never rename.
type CohostResult struct {
	CapacityBytes        uint64          `json:"capacity_bytes"` // 0: unlimited
	ContextOverheadBytes uint64          `json:"context_overhead_bytes"`
	Processes            []ProcessResult `json:"processes"`
	Total                CohostTotal     `json:"total"`
	// OOMEvents lists the OOMs in merged order, each with its blame
	// (at most 1000; Total.OOMs counts all).
	OOMEvents        []CohostOOM `json:"oom_events,omitempty"`
	MinCapacityBytes uint64      `json:"min_capacity_bytes,omitempty"`
	// OutsideModel is the outside-memory model the forecast's silent-OOM
	// risk used where the traces had no device_mem samples; nil without a
	// forecast or a capacity.
	OutsideModel *OutsideModel `json:"outside_model,omitempty"`
}

// ProcessResult is one process's replay.
type ProcessResult struct {
	Name     string    `json:"name"`
	OffsetNS int64     `json:"offset_ns"`
	Scale    float64   `json:"scale"`
	Result   *Result   `json:"result"`
	Forecast *Forecast `json:"forecast,omitempty"`
	// AvoidableOOMs counts the process's OOMs the others' releasable
	// memory would have avoided; BlamedOOMs the other processes' OOMs
	// this one is blamed for.
	AvoidableOOMs int64 `json:"avoidable_ooms"`
	BlamedOOMs    int64 `json:"blamed_ooms"`
}

// CohostTotal sums the processes on the merged clock.
type CohostTotal struct {
	Events int64 `json:"events"`
	// PeakReservedBytes is the peak of the allocators' reserved bytes
	// summed over processes; PeakUsedBytes adds the context overheads.
	PeakReservedBytes  uint64 `json:"peak_reserved_bytes"`
	PeakUsedBytes      uint64 `json:"peak_used_bytes"`
	PeakActiveBytes    uint64 `json:"peak_active_bytes"`
	PeakAllocatedBytes uint64 `json:"peak_allocated_bytes"`
	PeakRequestedBytes uint64 `json:"peak_requested_bytes"`
	PeakTimeNS         int64  `json:"peak_time_ns"` // merged clock
	OOMs               int64  `json:"ooms"`
	AvoidableOOMs      int64  `json:"avoidable_ooms"`
	// Fragmentation uses the single-replay formulas on the summed state;
	// PeakIndex is the merged event index. ExternalPct is 1 − (largest
	// free block of any process) / (cached-free bytes of all processes):
	// one process cannot use another's cache.
	Fragmentation Fragmentation `json:"fragmentation"`
	// MaxCachedFreeBytes is the largest sum of cached-free bytes
	// (reserved − active) over processes: memory one process cached that
	// the others could not get.
	MaxCachedFreeBytes uint64 `json:"max_cached_free_bytes"`
}

// CohostOOM is an OOM of one process with its cause.
type CohostOOM struct {
	Process int    `json:"process"`
	Name    string `json:"name"`
	// OOM is the process's own view (its event index and time, its
	// reserved, cached-free and largest free bytes after it released its
	// own cache).
	OOM OOM `json:"oom"`
	// MergedIndex and MergedTimeNS place it on the merged clock.
	MergedIndex  int64 `json:"merged_index"`
	MergedTimeNS int64 `json:"merged_time_ns"`
	// AskedBytes is what the policy last asked of the device and was
	// refused (0: refused by its own cap, not by the shared device).
	AskedBytes uint64 `json:"asked_bytes"`
	// DeviceFreeBytes is what the device could still give then.
	DeviceFreeBytes uint64 `json:"device_free_bytes"`
	// ShortfallBytes is AskedBytes − DeviceFreeBytes.
	ShortfallBytes uint64 `json:"shortfall_bytes"`
	// Holders lists every other process's memory then, most cached-free
	// bytes first.
	Holders []Holder `json:"holders"`
	// OthersCachedFreeBytes and OthersReleasableBytes sum Holders.
	OthersCachedFreeBytes uint64 `json:"others_cached_free_bytes"`
	OthersReleasableBytes uint64 `json:"others_releasable_bytes"`
	// Avoidable is true when the OOM would not have happened had the other
	// processes released their wholly free cached segments (their
	// releasable bytes cover the shortfall).
	Avoidable bool `json:"avoidable"`
	// CachedFreeCovers is true when the others' cached-free bytes, wherever
	// they lie, cover the shortfall: the OOM is due to memory cached by
	// other processes, though part of it may be stranded in their
	// segments (a compacting or page-based allocator would get it back).
	CachedFreeCovers bool `json:"cached_free_covers"`
	// Blamed are the fewest other processes (most releasable first) whose
	// releasable bytes cover the shortfall; empty when not avoidable.
	Blamed []int `json:"blamed,omitempty"`
}

// Holder is one process's memory at another's OOM.
type Holder struct {
	Process       int    `json:"process"`
	Name          string `json:"name"`
	ReservedBytes uint64 `json:"reserved_bytes"`
	ActiveBytes   uint64 `json:"active_bytes"`
	// CachedFreeBytes is reserved − active: memory the process's
	// allocator caches and no other process can use.
	CachedFreeBytes uint64 `json:"cached_free_bytes"`
	// ReleasableBytes is the cached-free memory in wholly free segments
	// (cached-free − stranded): what its empty_cache would give back.
	ReleasableBytes uint64 `json:"releasable_bytes"`
}

// cohostBatch is how many events each process's reader buffers.
const cohostBatch = 256

// proc is one process during a co-hosted replay.
type proc struct {
	i    int
	p    *Process
	e    *engine
	r    *trace.Reader
	c    io.Closer
	pols []driver.Policy
	devs []*device

	buf      []trace.Event
	n, next  int
	done     bool
	t0       int64
	haveT0   bool
	lastT    int64 // merged time of the last event read
	headT    int64 // merged time of the head event
	clockErr error // set when an event's merged time is out of range
	seenOOMs int64

	// state after the last event, from the engine's observer
	reserved, active, allocated, requested uint64
	largest, stranded                      uint64
	index                                  int64

	fc *Forecaster

	startT  int64 // merged time of the first event
	started bool

	avoidable, blamed int64
}

// head returns the process's next event, reading ahead as needed.
func (q *proc) head() (*trace.Event, error) {
	if q.next < q.n {
		return &q.buf[q.next], nil
	}
	if q.done {
		return nil, nil
	}
	n, err := q.r.ReadEvents(q.buf)
	if n == 0 {
		if err == io.EOF || err == nil {
			q.done = true
			return nil, nil
		}
		return nil, fmt.Errorf("%s: after event %d: %w", q.p.Name, q.e.index, err)
	}
	q.n, q.next = n, 0
	ev := &q.buf[0]
	q.headT = q.mergedTime(ev.TimeNS)
	if q.clockErr != nil {
		return nil, q.clockErr
	}
	return ev, nil
}

// ErrClock is wrapped by the error Cohost returns when a process's offset
// and scale put one of its events outside the merged clock's range (int64
// nanoseconds, about ±292 years): a mistake in the offsets or scales given.
var ErrClock = errors.New("time out of the merged clock's range")

// mergedTime maps a trace time to the merged clock; an event without a
// time takes the previous event's. A time out of the clock's range sets
// q.clockErr and returns the previous one.
func (q *proc) mergedTime(t int64) int64 {
	if t == 0 {
		if !q.haveT0 {
			return q.p.OffsetNS
		}
		return q.lastT
	}
	if !q.haveT0 {
		q.t0, q.haveT0 = t, true
	}
	s := q.p.Scale
	if s == 0 {
		s = 1
	}
	dt := t - q.t0
	x := math.Round(float64(dt) * s)
	m := q.p.OffsetNS + int64(x)
	if (dt < 0) != (t < q.t0) || !(x >= math.MinInt64 && x < math.MaxInt64) || (m < q.p.OffsetNS) != (x < 0) {
		if q.clockErr == nil {
			q.clockErr = fmt.Errorf("%s: event at %d ns, %d ns after its first, is out of range with offset %d ns and scale %g: %w",
				q.p.Name, t, dt, q.p.OffsetNS, s, ErrClock)
		}
		return q.lastT
	}
	q.lastT = m
	return m
}

// refresh reads the process's reserved bytes from its devices and its
// policies' stats.
func (q *proc) refresh() {
	var r uint64
	for _, d := range q.devs {
		r += d.reserved
	}
	q.reserved = r
	var st driver.Stats
	for _, pol := range q.pols {
		s := pol.Stats()
		st.LargestFreeBytes = max(st.LargestFreeBytes, s.LargestFreeBytes)
		st.StrandedBytes += s.StrandedBytes
	}
	q.largest, q.stranded = st.LargestFreeBytes, st.StrandedBytes
}

func (q *proc) cachedFree() uint64 {
	if q.reserved > q.active {
		return q.reserved - q.active
	}
	return 0
}

func (q *proc) releasable() uint64 {
	if c := q.cachedFree(); c > q.stranded {
		return c - q.stranded
	}
	return 0
}

// check refuses sizes past MaxSizeBytes: a sum of such sizes (the
// processes' overheads, the outside model's bytes) could wrap to a small
// number and hide every OOM.
func (cfg *CohostConfig) check() error {
	for _, v := range []struct {
		name string
		n    uint64
	}{
		{"capacity", cfg.CapacityBytes},
		{"context overhead", cfg.ContextOverheadBytes},
		{"outside context", cfg.Outside.ContextBytes},
		{"outside libraries", cfg.Outside.LibraryBytes},
		{"outside growth cap", cfg.Outside.GrowthCapBytes},
		{"outside reserve", cfg.Outside.ReserveBytes},
	} {
		if v.n > MaxSizeBytes {
			return fmt.Errorf("cohost: %s of %d bytes is above the largest size, %d (256 TiB)", v.name, v.n, uint64(MaxSizeBytes))
		}
	}
	if g := cfg.Outside.GrowthBytesPerS; !(g >= 0 && g <= MaxSizeBytes) {
		return fmt.Errorf("cohost: outside growth of %v bytes/s: want 0 to %d", g, uint64(MaxSizeBytes))
	}
	return nil
}

// MaxCohostProcesses is the most processes Cohost puts on one device: more
// than CUDA's MPS serves (48 clients a device), and a bound on the work
// and memory, which grow with the square of the processes (each OOM and
// each forecast weighs every other process).
const MaxCohostProcesses = 64

// Cohost replays several traces (at most MaxCohostProcesses) on one
// device, merged by time (ties go to the lower process index, and each
// trace keeps its own order). Each
// process has its own policy, which sees a device of the full capacity
// but is refused whatever the other processes and every process's context
// overhead already hold: when it is refused, it releases its own cache and
// retries as it would alone; the others keep theirs. Memory is bounded by
// the processes' live state, not by the traces' lengths.
//
// A trace with several devices has them all on the one shared device.
func Cohost(procs []Process, cfg CohostConfig) (*CohostResult, error) {
	if len(procs) == 0 {
		return nil, errors.New("cohost: no process")
	}
	if len(procs) > MaxCohostProcesses {
		return nil, fmt.Errorf("cohost: %d processes, more than the %d one device serves", len(procs), MaxCohostProcesses)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	pool := &sharedPool{capacity: cfg.CapacityBytes, outside: uint64(len(procs)) * cfg.ContextOverheadBytes}
	if cfg.CapacityBytes > 0 && pool.outside >= cfg.CapacityBytes {
		return nil, fmt.Errorf("cohost: %d context overheads of %s leave nothing of %s",
			len(procs), FormatBytes(cfg.ContextOverheadBytes), FormatBytes(cfg.CapacityBytes))
	}
	qs := make([]*proc, len(procs))
	sil := newSilent(cfg, qs)
	defer func() {
		for _, q := range qs {
			if q != nil && q.c != nil {
				q.c.Close()
			}
		}
	}()
	for i := range procs {
		q, err := openProc(i, &procs[i], cfg, pool, sil)
		qs[i] = q // closed by the deferred function, also on an error
		if err != nil {
			return nil, err
		}
	}

	if cfg.SharedClock {
		if err := shareClock(qs); err != nil {
			return nil, err
		}
	}
	// A completed free reaches a policy just before that process's next
	// request (the engine holds it back, see Run). Another process must
	// not be refused memory such a free would have given back: before a
	// refusal, every process's held-back frees are passed on.
	pool.flush = func() {
		for _, q := range qs {
			for _, ds := range q.e.devs {
				if len(ds.fc) > 0 {
					q.e.dispatch(ds)
					pool.flushed = true
				}
			}
		}
	}
	res := &CohostResult{CapacityBytes: cfg.CapacityBytes, ContextOverheadBytes: cfg.ContextOverheadBytes}
	if sil.on {
		m := sil.model
		res.OutsideModel = &m
	}
	t := &totals{qs: qs, pool: pool}
	var merged int64
	for {
		// pick the process whose next event comes first
		var best *proc
		var bestT int64
		for _, q := range qs {
			ev, err := q.head()
			if err != nil {
				return nil, err
			}
			if ev == nil {
				continue
			}
			if best == nil || q.headT < bestT {
				best, bestT = q, q.headT
			}
		}
		if best == nil {
			break
		}
		q := best
		ev := &q.buf[q.next]
		q.next++
		pool.refused = 0
		if err := q.e.step(ev); err != nil {
			return nil, fmt.Errorf("%s: %w", q.p.Name, err)
		}
		if pool.flushed {
			// other processes' policies took their held-back frees
			pool.flushed = false
			for _, o := range qs {
				o.refresh()
			}
		} else {
			q.refresh()
		}
		if n := q.e.res.OOMs; n > q.seenOOMs {
			q.seenOOMs = n
			o := blame(q, qs, pool, merged, bestT)
			if o.Avoidable {
				t.avoidable++
				q.avoidable++
				for _, b := range o.Blamed {
					qs[b].blamed++
				}
			}
			if len(res.OOMEvents) < maxOOMEvents {
				res.OOMEvents = append(res.OOMEvents, o)
			}
		}
		t.measure(merged, bestT)
		if !q.started {
			q.startT, q.started = bestT, true
		}
		if cfg.Forecast {
			free := pool.free()
			for _, o := range qs {
				if o.fc != nil && (o == q || o.e.res.Events > 0) {
					o.fc.Observe(o.index, bestT, Headroom(o.largest, free, o.cachedFree(), o.stranded))
				}
			}
			sil.observe(bestT)
		}
		// the head's time, now that the previous one is consumed
		if q.next < q.n {
			q.headT = q.mergedTime(q.buf[q.next].TimeNS)
			if q.clockErr != nil {
				return nil, q.clockErr
			}
		}
		merged++
		if cfg.Progress != nil && merged&(1<<20-1) == 0 {
			cfg.Progress(merged)
		}
	}
	if err := finishProcs(qs, sil, res); err != nil {
		return nil, err
	}
	res.Total = t.result(merged)
	return res, nil
}

// finishProcs ends every process's replay and adds its result, with its
// OOMs' blame and its forecast, to res.
func finishProcs(qs []*proc, sil *silent, res *CohostResult) error {
	for _, q := range qs {
		if err := q.e.finish(); err != nil {
			return fmt.Errorf("%s: %w", q.p.Name, err)
		}
		r := q.e.res
		r.Conf = q.p.Conf
		pr := ProcessResult{Name: q.p.Name, OffsetNS: q.p.OffsetNS, Scale: q.p.Scale, Result: &r,
			AvoidableOOMs: q.avoidable, BlamedOOMs: q.blamed}
		if pr.Scale == 0 {
			pr.Scale = 1
		}
		if q.fc != nil {
			q.fc.finishSilent(sil.source(), q.e.hdr.GPUTotalBytes, r.PeakReservedBytes)
			pr.Forecast = q.fc.Result()
		}
		res.Processes = append(res.Processes, pr)
	}
	return nil
}

// openProc opens process i's trace and starts its engine on the shared
// pool. A process opened is returned also with an error, to be closed.
func openProc(i int, p *Process, cfg CohostConfig, pool *sharedPool, sil *silent) (*proc, error) {
	if p.Name == "" {
		p.Name = fmt.Sprintf("process %d", i)
	}
	if p.Open == nil || p.Factory == nil {
		return nil, fmt.Errorf("cohost: %s: no trace or no policy", p.Name)
	}
	if p.Scale < 0 || math.IsNaN(p.Scale) || math.IsInf(p.Scale, 0) {
		return nil, fmt.Errorf("cohost: %s: bad time scale %g", p.Name, p.Scale)
	}
	r, c, err := p.Open()
	if err != nil {
		return nil, fmt.Errorf("cohost: %s: %w", p.Name, err)
	}
	q := &proc{i: i, p: p, r: r, c: c, buf: make([]trace.Event, cohostBatch)}
	if cfg.Forecast {
		q.fc = NewForecaster(cfg.ForecastPoints)
		if cfg.CapacityBytes == 0 {
			q.fc.SetUnlimited()
		}
	}
	ecfg := p.Config
	ecfg.CapacityBytes = cfg.CapacityBytes
	ecfg.OutsideBytes = 0
	ecfg.Progress = nil
	ecfg.noFraction = cfg.noFraction
	ecfg.Observer = func(s *Sample) {
		q.active = s.ActiveBytes
		q.allocated, q.requested = s.AllocatedBytes, s.RequestedBytes
		q.index = s.Index
		if q.fc != nil && isRequest(s.Event.Kind) {
			q.fc.Request(s.Event.SizeBytes)
		}
		if s.Event.Kind == trace.KindDeviceMem {
			sil.sample(s.Event.SizeBytes)
		}
	}
	inner := p.Factory
	f := func(dev driver.Device, h *trace.Header) (driver.Policy, error) {
		pol, err := inner(dev, h)
		if err != nil {
			return nil, err
		}
		d, ok := dev.(*device)
		if !ok {
			return nil, errors.New("cohost: the engine's device is not shareable")
		}
		d.pool = pool
		pool.devs = append(pool.devs, d)
		q.devs = append(q.devs, d)
		q.pols = append(q.pols, pol)
		return pol, nil
	}
	hdr := r.Header()
	if hdr == nil {
		hdr = &trace.Header{}
	}
	q.e = &engine{cfg: ecfg, factory: f, hdr: hdr}
	if err := q.e.start(); err != nil {
		return q, fmt.Errorf("%s: %w", p.Name, err)
	}
	q.reserved = q.e.reserved
	q.active = q.e.active
	return q, nil
}

// silent tracks the device's free memory with the processes' outside
// memory for the forecast's silent-OOM risk.
type silent struct {
	on       bool
	capacity uint64
	model    OutsideModel
	qs       []*proc
	measured bool
	outside  uint64 // measured: capacity − free − Σ reserved at the last sample
	pending  bool
	free     uint64 // the pending sample's free bytes
}

func newSilent(cfg CohostConfig, qs []*proc) *silent {
	m := cfg.Outside
	if m == (OutsideModel{}) {
		m = DefaultOutsideModel()
	}
	return &silent{on: cfg.Forecast && cfg.CapacityBytes > 0, capacity: cfg.CapacityBytes, model: m, qs: qs}
}

// sample takes a device_mem sample's free bytes; observe, once the
// processes' reserved bytes are up to date, turns it into outside memory.
func (s *silent) sample(free uint64) {
	s.free, s.pending = free, true
}

func (s *silent) source() string {
	if s.measured {
		return "measured"
	}
	return "model"
}

// observe gives every running process the device's free memory at merged
// time at.
func (s *silent) observe(at int64) {
	if !s.on {
		return
	}
	var reserved uint64
	for _, q := range s.qs {
		reserved += q.reserved
	}
	if s.pending {
		s.pending = false
		s.measured = true
		s.outside = 0
		if used := reserved + s.free; used < s.capacity {
			s.outside = s.capacity - used
		}
	}
	outside := s.outside
	if !s.measured {
		outside = 0
		for _, q := range s.qs {
			if q.started {
				outside += s.model.At(at - q.startT)
			}
		}
	}
	free := uint64(0)
	if used := reserved + outside; used >= reserved && used < s.capacity {
		free = s.capacity - used
	}
	for _, q := range s.qs {
		if q.fc != nil && q.started {
			q.fc.observeSilent(silentState{index: q.index, timeNS: at, free: free, outside: outside,
				reserved: q.reserved, cachedFree: q.cachedFree(), releasable: q.releasable(), reserveOK: s.model.ReserveBytes})
		}
	}
}

// shareClock reads each process's first events and gives every process
// the earliest first timestamp as its time origin.
func shareClock(qs []*proc) error {
	var t0 int64
	have := false
	for _, q := range qs {
		n, err := q.r.ReadEvents(q.buf)
		if n == 0 {
			if err == io.EOF || err == nil {
				q.done = true
				continue
			}
			return fmt.Errorf("%s: %w", q.p.Name, err)
		}
		q.n, q.next = n, 0
		for _, ev := range q.buf[:n] {
			if ev.TimeNS != 0 {
				if !have || ev.TimeNS < t0 {
					t0, have = ev.TimeNS, true
				}
				break
			}
		}
	}
	if !have {
		return nil
	}
	for _, q := range qs {
		q.t0, q.haveT0 = t0, true
		if q.next < q.n {
			q.headT = q.mergedTime(q.buf[q.next].TimeNS)
			if q.clockErr != nil {
				return q.clockErr
			}
		}
	}
	return nil
}

// blame describes q's OOM: who held what, and whether the others' cache
// would have served it.
func blame(q *proc, qs []*proc, pool *sharedPool, merged, at int64) CohostOOM {
	o := CohostOOM{Process: q.i, Name: q.p.Name, MergedIndex: merged, MergedTimeNS: at, AskedBytes: pool.refused}
	if n := len(q.e.res.OOMEvents); n > 0 && q.e.res.OOMEvents[n-1].Index == q.index {
		o.OOM = q.e.res.OOMEvents[n-1]
	} else {
		o.OOM = OOM{Index: q.index, SizeBytes: q.e.ev.SizeBytes, Stream: q.e.ev.Stream, Device: q.e.ev.Device,
			TimeNS: q.e.ev.TimeNS, ReservedBytes: q.reserved, FreeCachedBytes: q.cachedFree(),
			LargestFreeBytes: q.largest, StrandedBytes: q.stranded}
	}
	o.DeviceFreeBytes = pool.free()
	if o.AskedBytes > o.DeviceFreeBytes {
		o.ShortfallBytes = o.AskedBytes - o.DeviceFreeBytes
	}
	for _, h := range qs {
		if h == q {
			continue
		}
		hd := Holder{Process: h.i, Name: h.p.Name, ReservedBytes: h.reserved, ActiveBytes: h.active,
			CachedFreeBytes: h.cachedFree(), ReleasableBytes: h.releasable()}
		o.Holders = append(o.Holders, hd)
		o.OthersCachedFreeBytes += hd.CachedFreeBytes
		o.OthersReleasableBytes += hd.ReleasableBytes
	}
	sort.SliceStable(o.Holders, func(a, b int) bool {
		return o.Holders[a].CachedFreeBytes > o.Holders[b].CachedFreeBytes
	})
	o.CachedFreeCovers = o.AskedBytes > 0 && o.ShortfallBytes > 0 && o.OthersCachedFreeBytes >= o.ShortfallBytes
	if o.AskedBytes > 0 && o.ShortfallBytes > 0 && o.OthersReleasableBytes >= o.ShortfallBytes {
		o.Avoidable = true
		hs := append([]Holder(nil), o.Holders...)
		sort.SliceStable(hs, func(a, b int) bool { return hs[a].ReleasableBytes > hs[b].ReleasableBytes })
		var sum uint64
		for _, h := range hs {
			if sum >= o.ShortfallBytes || h.ReleasableBytes == 0 {
				break
			}
			sum += h.ReleasableBytes
			o.Blamed = append(o.Blamed, h.Process)
		}
	}
	return o
}

// totals measures the summed state on the merged clock.
type totals struct {
	qs   []*proc
	pool *sharedPool

	res           CohostTotal
	atPeakActive  uint64
	twSum, twTime float64
	twSumN        float64
	twN           int64
	prevT         int64
	haveT         bool
	prevFrag      float64
	avoidable     int64
}

func (t *totals) measure(idx, at int64) {
	var reserved, active, allocated, requested, cached, stranded, largest uint64
	for _, q := range t.qs {
		reserved += q.reserved
		active += q.active
		allocated += q.allocated
		requested += q.requested
		cached += q.cachedFree()
		stranded += q.stranded
		largest = max(largest, q.largest)
	}
	r := &t.res
	if reserved > r.PeakReservedBytes {
		r.PeakReservedBytes = reserved
		r.PeakTimeNS = at
		t.atPeakActive = active
		fr := &r.Fragmentation
		fr.PeakIndex = idx
		fr.ExternalPct = 0
		if cached > 0 && largest < cached {
			fr.ExternalPct = 100 * (1 - float64(largest)/float64(cached))
		}
		fr.InternalBytes = allocated - min(allocated, requested)
		fr.StrandedBytes = stranded
	}
	r.PeakActiveBytes = max(r.PeakActiveBytes, active)
	r.PeakAllocatedBytes = max(r.PeakAllocatedBytes, allocated)
	r.PeakRequestedBytes = max(r.PeakRequestedBytes, requested)
	r.MaxCachedFreeBytes = max(r.MaxCachedFreeBytes, cached)
	r.Fragmentation.MaxStrandedBytes = max(r.Fragmentation.MaxStrandedBytes, stranded)
	if t.haveT && at > t.prevT {
		dt := float64(at - t.prevT)
		t.twSum += t.prevFrag * dt
		t.twTime += dt
	}
	t.prevT, t.haveT = at, true
	f := pct(active, reserved)
	t.prevFrag = f
	t.twSumN += f
	t.twN++
}

func (t *totals) result(events int64) CohostTotal {
	r := t.res
	r.Events = events
	r.PeakUsedBytes = r.PeakReservedBytes + t.pool.outside
	for _, q := range t.qs {
		r.OOMs += q.e.res.OOMs
	}
	r.AvoidableOOMs = t.avoidable
	fr := &r.Fragmentation
	fr.AtPeakPct = pct(t.atPeakActive, r.PeakReservedBytes)
	fr.PeakRatioPct = pct(r.PeakActiveBytes, r.PeakReservedBytes)
	if t.twTime > 0 {
		fr.TimeWeightedPct = t.twSum / t.twTime
	} else if t.twN > 0 {
		fr.TimeWeightedPct = t.twSumN / float64(t.twN)
	}
	if r.PeakRequestedBytes > 0 {
		fr.OverheadRatio = float64(r.PeakReservedBytes) / float64(r.PeakRequestedBytes)
	}
	return r
}

// CohostMinCapacity returns the smallest device capacity, to 2 MiB, on
// which every process completes with no OOM, context overheads included.
// Memory fractions (the processes', their traces' and their policies')
// are ignored: the device itself is sized. cfg.CapacityBytes and
// cfg.Forecast are ignored.
func CohostMinCapacity(procs []Process, cfg CohostConfig) (uint64, error) {
	run := func(capacity uint64) (*CohostResult, error) {
		c := cfg
		c.CapacityBytes = capacity
		c.Forecast = false
		c.Progress = nil
		c.noFraction = true
		return Cohost(procs, c)
	}
	free, err := run(0)
	if err != nil {
		return 0, err
	}
	if free.Total.OOMs > 0 {
		return 0, errors.New("cohost: OOMs even on an unlimited device")
	}
	const step = 2 << 20
	hi := (free.Total.PeakUsedBytes + step - 1) / step * step
	lo := uint64(len(procs)) * cfg.ContextOverheadBytes / step * step // infeasible: nothing left
	if hi <= lo {
		return hi, nil
	}
	if free.Total.PeakReservedBytes == 0 {
		return (lo + step), nil
	}
	top := hi
	hi, err = bisect(lo, hi, step, func(c uint64) (bool, error) {
		res, err := run(c)
		return err == nil && res.Total.OOMs == 0, err
	})
	if err != nil {
		return 0, err
	}
	if hi == top {
		// never run at this size: a policy sizing itself by the device's
		// total (e.g. a garbage-collection threshold) may differ from the
		// unlimited run.
		res, err := run(hi)
		if err != nil {
			return 0, err
		}
		if res.Total.OOMs > 0 {
			return 0, fmt.Errorf("cohost: %d OOMs at the unlimited run's peak use %s", res.Total.OOMs, FormatBytes(hi))
		}
	}
	return hi, nil
}
