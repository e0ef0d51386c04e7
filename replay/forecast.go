package replay

import (
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
	// MinHeadroomBytes is the smallest headroom seen, at MinHeadroomIndex.
	MinHeadroomBytes  uint64 `json:"min_headroom_bytes"`
	MinHeadroomIndex  int64  `json:"min_headroom_index"`
	MinHeadroomTimeNS int64  `json:"min_headroom_time_ns"`
	// MaxRequestBytes is the largest request of the run.
	MaxRequestBytes uint64 `json:"max_request_bytes"`
	// Shortfalls counts the observations with headroom below demand.
	Shortfalls int64 `json:"shortfalls"`
	// Series is the headroom over time, downsampled: each point is the
	// smallest headroom of the observations it stands for.
	Series []ForecastPoint `json:"series"`
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
	return &Forecaster{fc: Forecast{FirstShortfallIndex: -1, MinHeadroomIndex: -1}, maxPoints: maxPoints, stride: 1}
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

// Result returns the forecast so far.
func (f *Forecaster) Result() *Forecast {
	fc := f.fc
	fc.Series = append([]ForecastPoint(nil), f.fc.Series...)
	if f.inBucket > 0 {
		fc.Series = append(fc.Series, f.cur)
	}
	return &fc
}

// ForecastObserver returns an Observer (Config.Observer) for a replay of
// one trace on a device of capacityBytes (0: unlimited) with outsideBytes
// held outside the allocator. It feeds f and then calls next, when set.
// A trace with several devices is seen as one.
func (f *Forecaster) ForecastObserver(capacityBytes, outsideBytes uint64, next func(*Sample)) func(*Sample) {
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
// when set, is still called.
func RunForecast(r *trace.Reader, f driver.Factory, cfg Config, maxPoints int) (*Result, *Forecast, error) {
	capacity := cfg.CapacityBytes
	if capacity == 0 && r.Header() != nil {
		capacity = r.Header().GPUTotalBytes
	}
	fc := NewForecaster(maxPoints)
	cfg.Observer = fc.ForecastObserver(capacity, cfg.OutsideBytes, cfg.Observer)
	res, err := Run(r, f, cfg)
	return res, fc.Result(), err
}
