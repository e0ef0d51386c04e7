package replay

import (
	"fmt"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// The silent-OOM forecast: how large a request a process could still have
// served, event after event, against what its workload asks for.
//
// Headroom is the largest request the policy could serve at a moment
// without an OOM: the larger of its largest free block and what the device
// could still give it after it released its wholly free cached segments
// (device free bytes + cached-free bytes − stranded bytes), rounded down
// to the 2 MiB granularity large segments are asked in. Releasing before
// failing is what the caching and expandable policies do (release and
// retry); a policy that never releases makes this an upper bound.
//
// The workload's demand is the largest request it has made so far: a
// workload that asked for that size once may ask for it again (the next
// batch, the next long prompt). The first shortfall is the first moment
// headroom drops below it; an actual OOM is a shortfall, but a shortfall
// comes earlier, while the run still succeeds: a silent OOM forecast.

// segmentGranularity is the unit large segments are asked in.
const segmentGranularity = 2 << 20

// DefaultForecastPoints is the series length a Forecaster keeps by default.
const DefaultForecastPoints = 1000

// Forecast is the silent-OOM forecast of one run (or one co-hosted process).
// JSON keys are stable: add, never rename.
type Forecast struct {
	// FirstShortfallIndex is the event index after which the headroom first
	// fell below the largest request seen so far; -1 when it never did.
	FirstShortfallIndex  int64 `json:"first_shortfall_index"`
	FirstShortfallTimeNS int64 `json:"first_shortfall_time_ns"`
	// ShortfallHeadroomBytes and ShortfallRequestBytes are the headroom and
	// the largest request then.
	ShortfallHeadroomBytes uint64 `json:"shortfall_headroom_bytes,omitempty"`
	ShortfallRequestBytes  uint64 `json:"shortfall_request_bytes,omitempty"`
	// MinHeadroomBytes is the smallest headroom seen, at MinHeadroomIndex;
	// 0 on an unlimited device (Unlimited), where the headroom has no
	// bound to measure.
	MinHeadroomBytes  uint64 `json:"min_headroom_bytes"`
	MinHeadroomIndex  int64  `json:"min_headroom_index"`
	MinHeadroomTimeNS int64  `json:"min_headroom_time_ns"`
	// MaxRequestBytes is the largest request of the run.
	MaxRequestBytes uint64 `json:"max_request_bytes"`
	// Shortfalls counts the observations with headroom below demand.
	Shortfalls int64 `json:"shortfalls"`
	// Series is the headroom over time, downsampled: each point is the
	// smallest headroom of the observations it stands for. Empty on an
	// unlimited device.
	Series []ForecastPoint `json:"series"`
	// Unlimited is set when the device had no capacity (none given and
	// none in the trace's header): every request could be served, no
	// shortfall is possible and the headroom figures are left at 0.
	Unlimited bool `json:"unlimited,omitempty"`

	// The silent-OOM risk: memory outside the allocator (see
	// OutsideModel). SilentRiskTimeNS is the first moment the device's free
	// memory, outside memory included, fell below OutsideReserveBytes
	// (-1: never), with the free bytes then; SilentRiskIndex is the
	// process's event index then.
	SilentRiskTimeNS    int64  `json:"silent_risk_time_ns"`
	SilentRiskFreeBytes uint64 `json:"silent_risk_free_bytes"`
	SilentRiskIndex     int64  `json:"silent_risk_index"`
	// OutsideReserveBytes is what the process's outside memory may still
	// ask for; OutsideSource says where its outside memory came from:
	// "model" or "measured" (device_mem samples); OutsideBytes is the
	// outside memory of the device at the risk (or at the smallest free).
	OutsideReserveBytes uint64 `json:"outside_reserve_bytes"`
	OutsideSource       string `json:"outside_source,omitempty"`
	OutsideBytes        uint64 `json:"outside_bytes"`
	// SilentMinFreeBytes is the smallest device free memory seen, at
	// SilentMinFreeTimeNS: how close a run without a risk came.
	SilentMinFreeBytes  uint64 `json:"silent_min_free_bytes"`
	SilentMinFreeTimeNS int64  `json:"silent_min_free_time_ns"`
	// At the risk: the process's reserved bytes, its cached-free bytes
	// (what empty_cache() or a garbage-collection threshold could return)
	// and, of those, the releasable bytes in wholly free segments.
	RiskReservedBytes   uint64 `json:"risk_reserved_bytes,omitempty"`
	RiskCachedFreeBytes uint64 `json:"risk_cached_free_bytes,omitempty"`
	RiskReleasableBytes uint64 `json:"risk_releasable_bytes,omitempty"`
	// SilentRisk is the risk and what reduces it, in one line; empty when
	// there is none.
	SilentRisk string `json:"silent_risk,omitempty"`
}

// ForecastPoint is one point of a forecast's series.
type ForecastPoint struct {
	Index           int64  `json:"index"`
	TimeNS          int64  `json:"time_ns"`
	HeadroomBytes   uint64 `json:"headroom_bytes"`
	MaxRequestBytes uint64 `json:"max_request_bytes"` // the demand then
}

// Headroom returns the largest request a policy could serve: the larger of
// its largest free block and, after releasing its wholly free cached
// segments (cachedFree − stranded), what the device could give, rounded
// down to 2 MiB.
func Headroom(largestFree, deviceFree, cachedFree, stranded uint64) uint64 {
	rel := uint64(0)
	if cachedFree > stranded {
		rel = cachedFree - stranded
	}
	dev := deviceFree + rel
	if dev < deviceFree { // overflow
		dev = deviceFree
	}
	dev = dev / segmentGranularity * segmentGranularity
	return max(largestFree, dev)
}

// Forecaster builds a Forecast from observations, in memory bounded by
// its series length.
type Forecaster struct {
	fc        Forecast
	maxPoints int
	stride    int64 // observations per point
	inBucket  int64
	cur       ForecastPoint
	seen      bool
	seenFree  bool
}

// NewForecaster returns a Forecaster keeping at most maxPoints series
// points (DefaultForecastPoints when maxPoints <= 0).
func NewForecaster(maxPoints int) *Forecaster {
	if maxPoints <= 0 {
		maxPoints = DefaultForecastPoints
	}
	if maxPoints < 2 {
		maxPoints = 2
	}
	return &Forecaster{fc: Forecast{FirstShortfallIndex: -1, MinHeadroomIndex: -1, SilentRiskTimeNS: -1, SilentRiskIndex: -1},
		maxPoints: maxPoints, stride: 1}
}

// Request records a request of sizeBytes the workload made (served or not).
func (f *Forecaster) Request(sizeBytes uint64) {
	if sizeBytes > f.fc.MaxRequestBytes {
		f.fc.MaxRequestBytes = sizeBytes
	}
}

// Observe records the headroom after event index at timeNS.
func (f *Forecaster) Observe(index, timeNS int64, headroom uint64) {
	fc := &f.fc
	demand := fc.MaxRequestBytes
	if !f.seen || headroom < fc.MinHeadroomBytes {
		fc.MinHeadroomBytes, fc.MinHeadroomIndex, fc.MinHeadroomTimeNS = headroom, index, timeNS
	}
	f.seen = true
	if headroom < demand {
		fc.Shortfalls++
		if fc.FirstShortfallIndex < 0 {
			fc.FirstShortfallIndex, fc.FirstShortfallTimeNS = index, timeNS
			fc.ShortfallHeadroomBytes, fc.ShortfallRequestBytes = headroom, demand
		}
	}
	p := ForecastPoint{Index: index, TimeNS: timeNS, HeadroomBytes: headroom, MaxRequestBytes: demand}
	if f.inBucket == 0 || headroom < f.cur.HeadroomBytes {
		keep := f.cur.MaxRequestBytes
		f.cur = p
		if f.inBucket > 0 {
			f.cur.MaxRequestBytes = max(keep, demand)
		}
	} else {
		f.cur.MaxRequestBytes = demand
	}
	f.inBucket++
	if f.inBucket >= f.stride {
		f.flush()
	}
}

func (f *Forecaster) flush() {
	if f.inBucket == 0 {
		return
	}
	f.fc.Series = append(f.fc.Series, f.cur)
	f.inBucket = 0
	if len(f.fc.Series) >= f.maxPoints {
		// halve the series: each pair becomes its smaller-headroom point
		s := f.fc.Series
		n := 0
		for i := 0; i < len(s); i += 2 {
			p := s[i]
			if i+1 < len(s) {
				q := s[i+1]
				if q.HeadroomBytes < p.HeadroomBytes {
					q.MaxRequestBytes = max(q.MaxRequestBytes, p.MaxRequestBytes)
					p = q
				} else {
					p.MaxRequestBytes = max(p.MaxRequestBytes, q.MaxRequestBytes)
				}
			}
			s[n] = p
			n++
		}
		f.fc.Series = s[:n]
		f.stride *= 2
	}
}

// SetUnlimited says the device has no capacity: Result then reports the
// forecast as Unlimited, with no headroom figures (the headroom observed
// is a stand-in for "any request fits", not a measure).
func (f *Forecaster) SetUnlimited() { f.fc.Unlimited = true }

// Result returns the forecast so far.
func (f *Forecaster) Result() *Forecast {
	fc := f.fc
	fc.Series = append([]ForecastPoint(nil), f.fc.Series...)
	if f.inBucket > 0 {
		fc.Series = append(fc.Series, f.cur)
	}
	if fc.Unlimited {
		fc.MinHeadroomBytes, fc.Series = 0, []ForecastPoint{}
	}
	return &fc
}

// ForecastObserver returns an Observer (Config.Observer) for a replay of
// one trace on a device of capacityBytes (0: unlimited) with outsideBytes
// held outside the allocator. It feeds f and then calls next, when set.
// A trace with several devices is seen as one.
func (f *Forecaster) ForecastObserver(capacityBytes, outsideBytes uint64, next func(*Sample)) func(*Sample) {
	if capacityBytes == 0 {
		f.SetUnlimited()
	}
	return func(s *Sample) {
		if isRequest(s.Event.Kind) {
			f.Request(s.Event.SizeBytes)
		}
		var largest, stranded uint64
		if s.Policy != nil {
			st := s.Policy.Stats()
			largest, stranded = st.LargestFreeBytes, st.StrandedBytes
		}
		devFree := uint64(unlimitedTotal)
		if capacityBytes > 0 {
			used := s.ReservedBytes + outsideBytes
			devFree = 0
			if used < capacityBytes {
				devFree = capacityBytes - used
			}
		}
		cached := uint64(0)
		if s.ReservedBytes > s.ActiveBytes {
			cached = s.ReservedBytes - s.ActiveBytes
		}
		f.Observe(s.Index, s.TimeNS, Headroom(largest, devFree, cached, stranded))
		if next != nil {
			next(s)
		}
	}
}

// isRequest reports whether events of kind k ask the policy for memory.
func isRequest(k trace.Kind) bool { return k == trace.KindAlloc || k == trace.KindOOM }

// RunForecast replays r as Run does and returns its silent-OOM forecast
// too, on the device Run sizes: cfg.CapacityBytes, else the trace header's
// GPU total, else unlimited (no shortfall), less cfg.OutsideBytes.
// maxPoints bounds the series (0: DefaultForecastPoints). cfg.Observer,
// when set, is still called. The silent-OOM risk uses the default
// outside-memory model (RunForecastOutside).
func RunForecast(r *trace.Reader, f driver.Factory, cfg Config, maxPoints int) (*Result, *Forecast, error) {
	return RunForecastOutside(r, f, cfg, maxPoints, OutsideModel{})
}

// RunForecastOutside is RunForecast with the outside-memory model m (the
// zero value: DefaultOutsideModel, with cfg.OutsideBytes, when set, in
// place of its context and libraries) for the silent-OOM risk; a trace's
// device_mem samples replace the model by what they measured (the
// device's memory less its free bytes and the replayed reserved bytes,
// less what the capacity leaves to others). Times are the trace's.
func RunForecastOutside(r *trace.Reader, f driver.Factory, cfg Config, maxPoints int, m OutsideModel) (*Result, *Forecast, error) {
	capacity := cfg.CapacityBytes
	var total uint64
	if r.Header() != nil {
		total = r.Header().GPUTotalBytes
	}
	if capacity == 0 {
		capacity = total
	}
	if m == (OutsideModel{}) {
		m = DefaultOutsideModel()
		if cfg.OutsideBytes > 0 {
			m.ContextBytes, m.LibraryBytes, m.ContextOverrides = cfg.OutsideBytes, 0, true
		}
	}
	fc := NewForecaster(maxPoints)
	s := &soloSilent{m: m, capacity: capacity}
	cfg.Observer = fc.ForecastObserver(capacity, cfg.OutsideBytes, s.observer(fc, cfg.Observer))
	res, err := Run(r, f, cfg)
	if res != nil {
		fc.finishSilent(s.source(), total, res.PeakReservedBytes)
	}
	return res, fc.Result(), err
}

// soloSilent tracks one replayed process's silent-OOM risk.
type soloSilent struct {
	m        OutsideModel
	capacity uint64
	t0       int64
	haveT0   bool
	measured bool
	outside  uint64 // measured: capacity − free − reserved at the last sample
	lastT    int64
}

func (s *soloSilent) source() string {
	if s.measured {
		return "measured"
	}
	return "model"
}

func (s *soloSilent) observer(fc *Forecaster, next func(*Sample)) func(*Sample) {
	return func(smp *Sample) {
		if s.capacity > 0 {
			s.observe(fc, smp)
		}
		if next != nil {
			next(smp)
		}
	}
}

func (s *soloSilent) observe(fc *Forecaster, smp *Sample) {
	t := smp.TimeNS
	if t == 0 {
		t = s.lastT
	}
	s.lastT = t
	if t != 0 && !s.haveT0 {
		s.t0, s.haveT0 = t, true
	}
	if smp.Event.Kind == trace.KindDeviceMem {
		s.measured = true
		s.outside = 0
		if used := smp.ReservedBytes + smp.Event.SizeBytes; used < s.capacity {
			s.outside = s.capacity - used
		}
	}
	outside := s.outside
	if !s.measured {
		outside = s.m.At(t - s.t0)
	}
	free := uint64(0)
	if used := smp.ReservedBytes + outside; used >= outside && used < s.capacity {
		free = s.capacity - used
	}
	var cached, releasable uint64
	if smp.ReservedBytes > smp.ActiveBytes {
		cached = smp.ReservedBytes - smp.ActiveBytes
	}
	releasable = cached
	if smp.Policy != nil {
		if st := smp.Policy.Stats(); st.StrandedBytes < cached {
			releasable = cached - st.StrandedBytes
		} else {
			releasable = 0
		}
	}
	fc.observeSilent(silentState{index: smp.Index, timeNS: t, free: free, outside: outside,
		reserved: smp.ReservedBytes, cachedFree: cached, releasable: releasable, reserveOK: s.m.ReserveBytes})
}

// OutsideModel is the device memory a process holds outside its allocator,
// for traces without device_mem samples: the CUDA context, the libraries'
// handles and workspaces with the first kernels they load (cuBLAS, cuDNN),
// and the kernels loaded lazily afterwards as new shapes and paths run.
// At elapsed time τ since the process's first event:
//
//	outside(τ) = Context + Libraries + min(GrowthPerSec × τ, GrowthCap)
//
// The libraries are counted from the start: they load at the first
// compute, seconds in. Reserve is what the outside memory may still ask
// for at any moment (a new kernel set or library workspace): a process is
// at silent risk once the device's free memory falls below it, as the
// allocator's cache does not give memory back to the driver on its own.
type OutsideModel struct {
	ContextBytes     uint64  `json:"context_bytes"`
	LibraryBytes     uint64  `json:"library_bytes"`
	GrowthBytesPerS  float64 `json:"growth_bytes_per_s"`
	GrowthCapBytes   uint64  `json:"growth_cap_bytes"`
	ReserveBytes     uint64  `json:"reserve_bytes"`
	ContextOverrides bool    `json:"-"` // ContextBytes was given (LibraryBytes then 0), not calibrated
}

// The outside-memory model's figures, calibrated on the co-hosted serving
// recordings in traces/serving (H200, driver 580, PyTorch 2.11, two
// processes each serving two Llama-style models): the device's used memory
// less the blocker's and less both replayed allocators' reserved bytes.
const (
	// DefaultOutsideContextBytes is a process's context before its first
	// allocation: 549,486,592 B (524 MiB) in all three recordings.
	DefaultOutsideContextBytes = 549486592
	// DefaultOutsideLibraryBytes is the step at the first generate()
	// (cuBLAS/cuDNN handles, workspaces, the first kernels): 171.5 to 174
	// MiB a process.
	DefaultOutsideLibraryBytes = 172 << 20
	// DefaultOutsideGrowthBytesPerS is the lazy growth after: 1.33 to 1.77
	// MiB/s a process over the 40 s that followed.
	DefaultOutsideGrowthBytesPerS = 1.5 * (1 << 20)
	// DefaultOutsideGrowthCapBytes bounds the lazy growth: twice the 52 to
	// 65 MiB a process grew in 45 s (the set of kernels a service runs is
	// finite; the recordings did not run long enough to see it level off).
	DefaultOutsideGrowthCapBytes = 128 << 20
	// DefaultOutsideReserveBytes is the library step: what a new kernel
	// set or library workspace may ask for at once.
	DefaultOutsideReserveBytes = DefaultOutsideLibraryBytes
)

// DefaultOutsideModel returns the calibrated model.
func DefaultOutsideModel() OutsideModel {
	return OutsideModel{
		ContextBytes: DefaultOutsideContextBytes, LibraryBytes: DefaultOutsideLibraryBytes,
		GrowthBytesPerS: DefaultOutsideGrowthBytesPerS, GrowthCapBytes: DefaultOutsideGrowthCapBytes,
		ReserveBytes: DefaultOutsideReserveBytes,
	}
}

// At returns the model's outside memory elapsedNS after the process's start.
func (m OutsideModel) At(elapsedNS int64) uint64 {
	g := uint64(0)
	if elapsedNS > 0 && m.GrowthBytesPerS > 0 {
		x := m.GrowthBytesPerS * float64(elapsedNS) / 1e9
		if x >= float64(m.GrowthCapBytes) {
			g = m.GrowthCapBytes
		} else {
			g = uint64(x)
		}
	}
	return m.ContextBytes + m.LibraryBytes + g
}

// silentState is what ObserveSilent needs of a moment.
type silentState struct {
	index, timeNS         int64
	free, outside         uint64 // device free and outside bytes
	reserved, cachedFree  uint64 // the process's
	releasable, reserveOK uint64 // reserveOK: the reserve
}

// observeSilent records the device's free memory at a moment of the
// process's run.
func (f *Forecaster) observeSilent(s silentState) {
	fc := &f.fc
	fc.OutsideReserveBytes = s.reserveOK
	if !f.seenFree || s.free < fc.SilentMinFreeBytes {
		fc.SilentMinFreeBytes, fc.SilentMinFreeTimeNS = s.free, s.timeNS
		if fc.SilentRiskTimeNS < 0 {
			fc.OutsideBytes = s.outside
		}
	}
	f.seenFree = true
	if (SilentRisk{FreeBytes: s.free, ReserveBytes: s.reserveOK}).AtRisk() && fc.SilentRiskTimeNS < 0 {
		fc.SilentRiskTimeNS, fc.SilentRiskIndex, fc.SilentRiskFreeBytes = s.timeNS, s.index, s.free
		fc.OutsideBytes = s.outside
		fc.RiskReservedBytes, fc.RiskCachedFreeBytes, fc.RiskReleasableBytes = s.reserved, s.cachedFree, s.releasable
	}
}

// finishSilent writes the risk's line once the run is over. deviceTotal
// is the GPU's memory (the base of set_per_process_memory_fraction; 0:
// unknown) and peak the process's peak reserved bytes. The remedy is
// SilentRisk's at the risk.
func (f *Forecaster) finishSilent(source string, deviceTotal, peak uint64) {
	fc := &f.fc
	fc.OutsideSource = source
	if fc.SilentRiskTimeNS < 0 {
		return
	}
	r := SilentRisk{FreeBytes: fc.SilentRiskFreeBytes, ReserveBytes: fc.OutsideReserveBytes,
		ReservedBytes: fc.RiskReservedBytes, CachedFreeBytes: fc.RiskCachedFreeBytes,
		ReleasableBytes: fc.RiskReleasableBytes, DeviceTotalBytes: deviceTotal}
	fc.SilentRisk = fmt.Sprintf("silent OOM risk at event %d: device free %s < the %s its memory outside the allocator "+
		"(kernels loaded lazily, library workspaces; %s outside in all, %s) may still need, which the allocator does not see; "+
		"reduce it: %s; or lower its peak (%s reserved) under the best setting fragsim compare finds",
		fc.SilentRiskIndex, FormatBytes(fc.SilentRiskFreeBytes), FormatBytes(fc.OutsideReserveBytes),
		FormatBytes(fc.OutsideBytes), source, r.Remedy(), FormatBytes(peak))
}
