package analysis

import "math"

// DefaultMaxPoints bounds the points kept per time series.
const DefaultMaxPoints = 2000

// Series is one quantity over a replay, downsampled: each bucket of events
// keeps its minimum and its maximum (in time order), so peaks survive.
type Series struct {
	Name  string    `json:"name"`
	Unit  string    `json:"unit"`
	TimeS []float64 `json:"t_s"`    // seconds since the trace's first event
	Index []int64   `json:"index"`  // event index of each point
	Value []float64 `json:"values"` // in Unit
}

// Max returns the largest value of the series (0 when empty).
func (s *Series) Max() float64 {
	m := 0.0
	for i, v := range s.Value {
		if i == 0 || v > m {
			m = v
		}
	}
	return m
}

// point is one sample of one channel.
type point struct {
	index  int64
	timeNS int64
	value  float64
}

// bucket holds, per channel, the minimum and maximum points of a run of events.
type bucket struct {
	min, max []point
}

// sampler downsamples several channels sampled at the same events into at
// most maxBuckets buckets of equal event counts. When the buckets are full,
// neighbours are merged in pairs and the bucket width doubles, so memory is
// bounded whatever the trace's length and no extreme is ever lost.
type sampler struct {
	channels   int
	maxBuckets int
	width      int64 // events per bucket
	inCur      int64 // events in the current (last) bucket
	buckets    []bucket
	free       []bucket // recycled buckets
}

func newSampler(channels, maxPoints int) *sampler {
	if maxPoints <= 0 {
		maxPoints = DefaultMaxPoints
	}
	nb := maxPoints / 2
	if nb < 2 {
		nb = 2
	}
	return &sampler{channels: channels, maxBuckets: nb, width: 1}
}

func (s *sampler) newBucket() bucket {
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		return b
	}
	return bucket{min: make([]point, s.channels), max: make([]point, s.channels)}
}

// add records one event's values, one per channel.
func (s *sampler) add(index, timeNS int64, values []float64) {
	if len(s.buckets) == 0 || s.inCur >= s.width {
		if len(s.buckets) == s.maxBuckets {
			s.halve()
		}
		if len(s.buckets) == 0 || s.inCur >= s.width {
			b := s.newBucket()
			for c, v := range values {
				p := point{index, timeNS, v}
				b.min[c], b.max[c] = p, p
			}
			s.buckets = append(s.buckets, b)
			s.inCur = 1
			return
		}
	}
	b := &s.buckets[len(s.buckets)-1]
	for c, v := range values {
		if v < b.min[c].value {
			b.min[c] = point{index, timeNS, v}
		}
		if v > b.max[c].value {
			b.max[c] = point{index, timeNS, v}
		}
	}
	s.inCur++
}

// halve merges neighbouring buckets in pairs and doubles the width.
func (s *sampler) halve() {
	n := 0
	for i := 0; i < len(s.buckets); i += 2 {
		a := s.buckets[i]
		if i+1 < len(s.buckets) {
			b := s.buckets[i+1]
			for c := 0; c < s.channels; c++ {
				if b.min[c].value < a.min[c].value {
					a.min[c] = b.min[c]
				}
				if b.max[c].value > a.max[c].value {
					a.max[c] = b.max[c]
				}
			}
			s.free = append(s.free, b)
		}
		s.buckets[n] = a
		n++
	}
	// The last bucket holds inCur events of the old width: after a merge
	// of a full pair it holds width+inCur; of a lone bucket, inCur.
	if len(s.buckets)%2 == 0 {
		s.inCur += s.width
	}
	s.buckets = s.buckets[:n]
	s.width *= 2
}

// series returns channel c as a Series, times relative to t0NS, values
// multiplied by scale.
func (s *sampler) series(c int, name, unit string, t0NS int64, scale float64) Series {
	out := Series{Name: name, Unit: unit}
	for _, b := range s.buckets {
		lo, hi := b.min[c], b.max[c]
		first, second := lo, hi
		if hi.index < lo.index {
			first, second = hi, lo
		}
		out.append(first, t0NS, scale)
		if second.index != first.index {
			out.append(second, t0NS, scale)
		}
	}
	return out
}

func (s *Series) append(p point, t0NS int64, scale float64) {
	s.TimeS = append(s.TimeS, float64(p.timeNS-t0NS)/1e9)
	s.Index = append(s.Index, p.index)
	v := p.value * scale
	if math.IsNaN(v) {
		v = 0
	}
	s.Value = append(s.Value, v)
}
