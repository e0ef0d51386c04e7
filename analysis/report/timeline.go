package report

import (
	"math"

	"github.com/fragsim/fragsim/analysis"
)

// DefaultBuckets is the number of time buckets of the timeline. Each keeps
// the minimum and the maximum of every series, so the timeline has twice
// as many points; the browser then draws them per pixel, min and max.
const DefaultBuckets = 2000

// timelineSeries are the series of each run the timeline draws.
var timelineSeries = []string{"reserved", "active", "requested"}

// Timeline is every run's series on one time axis: T holds two points per
// bucket; each series holds, per bucket, its minimum and maximum in the
// order they happened, so no peak is lost.
type Timeline struct {
	T    []float64      `json:"t"` // seconds since the first event
	Runs []TimelineRuns `json:"runs"`
}

// TimelineRuns are the series of one run, in GiB. A setting variant
// carries its reserved bytes only: its requests are the trace's.
type TimelineRuns struct {
	Label     string    `json:"label"`
	Setting   bool      `json:"setting,omitempty"`
	Reserved  []float64 `json:"reserved"`
	Active    []float64 `json:"active,omitempty"`
	Requested []float64 `json:"requested,omitempty"`
}

// newTimeline puts the runs' series on buckets common buckets over
// [0, the last time seen].
func newTimeline(runs []*analysis.Run, buckets int) Timeline {
	if buckets <= 0 {
		buckets = DefaultBuckets
	}
	end := 0.0
	for _, r := range runs {
		for i := range r.Series {
			if n := len(r.Series[i].TimeS); n > 0 {
				end = math.Max(end, r.Series[i].TimeS[n-1])
			}
		}
	}
	if end <= 0 {
		buckets = 1
		end = 1
	}
	w := end / float64(buckets)
	tl := Timeline{T: make([]float64, 0, 2*buckets)}
	for b := 0; b < buckets; b++ {
		tl.T = append(tl.T, round6(float64(b)*w), round6((float64(b)+0.5)*w))
	}
	for _, r := range runs {
		if !r.OK() || len(r.Series) == 0 {
			continue
		}
		tr := TimelineRuns{Label: r.Label, Setting: r.Setting != ""}
		out := []*[]float64{&tr.Reserved, &tr.Active, &tr.Requested}
		for k, name := range timelineSeries {
			if k > 0 && tr.Setting {
				break
			}
			if s := r.SeriesNamed(name); s != nil {
				*out[k] = resample(s, buckets, w)
			}
		}
		tl.Runs = append(tl.Runs, tr)
	}
	return tl
}

// resample puts a series on the buckets: per bucket its minimum and its
// maximum, earlier first; a bucket with no point repeats the last value.
func resample(s *analysis.Series, buckets int, w float64) []float64 {
	out := make([]float64, 0, 2*buckets)
	i, last := 0, 0.0
	for b := 0; b < buckets; b++ {
		hi := float64(b+1) * w
		lo, mx := math.Inf(1), math.Inf(-1)
		loAt, mxAt := 0, 0
		for ; i < len(s.TimeS) && (s.TimeS[i] < hi || b == buckets-1); i++ {
			v := s.Value[i]
			if v < lo {
				lo, loAt = v, i
			}
			if v > mx {
				mx, mxAt = v, i
			}
		}
		if math.IsInf(lo, 1) {
			out = append(out, round4(last), round4(last))
			continue
		}
		last = s.Value[i-1]
		if mxAt < loAt {
			out = append(out, round4(mx), round4(lo))
		} else {
			out = append(out, round4(lo), round4(mx))
		}
	}
	return out
}

// round4 keeps four decimals (0.1 MiB in GiB): the report's JSON stays small.
func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

func round6(v float64) float64 { return math.Round(v*1e6) / 1e6 }
