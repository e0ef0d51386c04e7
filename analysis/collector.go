package analysis

import (
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// The channels of a replay's time series.
const (
	chReserved = iota
	chActive
	chAllocated
	chRequested
	chFragPct
	numChannels
)

const gib = 1 << 30

// collector observes one replay: it downsamples the time series and keeps
// the free-block histogram of the moment reserved peaked.
type collector struct {
	policy  string
	s       *sampler
	vals    [numChannels]float64
	t0      int64
	started bool

	peak     uint64
	peakSeen bool
	acc      histAcc
	histAt   *replay.Sample // copy of the sample at the captured peak (Policy cleared)
	inspects int64          // walks done, for tests
}

func newCollector(policy string, maxPoints int) *collector {
	return &collector{policy: policy, s: newSampler(numChannels, maxPoints)}
}

// FragPct is the at-the-moment fragmentation: 100·(1 − active/reserved),
// 0 when nothing is reserved.
func FragPct(reserved, active uint64) float64 {
	if reserved == 0 || active >= reserved {
		return 0
	}
	return 100 * (1 - float64(active)/float64(reserved))
}

func (c *collector) observe(s *replay.Sample) {
	if !c.started {
		c.t0 = s.TimeNS
		c.started = true
	}
	c.vals[chReserved] = float64(s.ReservedBytes)
	c.vals[chActive] = float64(s.ActiveBytes)
	c.vals[chAllocated] = float64(s.AllocatedBytes)
	c.vals[chRequested] = float64(s.RequestedBytes)
	c.vals[chFragPct] = FragPct(s.ReservedBytes, s.ActiveBytes)
	c.s.add(s.Index, s.TimeNS, c.vals[:])

	if s.ReservedBytes > c.peak || !c.peakSeen {
		c.peak = s.ReservedBytes
		c.peakSeen = true
		if in, ok := s.Policy.(driver.Inspector); ok {
			c.inspects++
			c.acc.reset()
			in.Segments(func(seg trace.Segment) bool {
				c.acc.addSegment(seg)
				return true
			})
			if c.histAt == nil {
				c.histAt = new(replay.Sample)
			}
			*c.histAt = *s
			c.histAt.Policy = nil
		}
	}
}

// series returns the collected time series: reserved, active, allocated and
// requested in GiB, fragmentation in percent.
func (c *collector) series() []Series {
	return []Series{
		c.s.series(chReserved, "reserved", "GiB", c.t0, 1.0/gib),
		c.s.series(chActive, "active", "GiB", c.t0, 1.0/gib),
		c.s.series(chAllocated, "allocated", "GiB", c.t0, 1.0/gib),
		c.s.series(chRequested, "requested", "GiB", c.t0, 1.0/gib),
		c.s.series(chFragPct, "fragmentation", "%", c.t0, 1),
	}
}

// histogram returns the free-block histogram at the peak, nil when the
// policy cannot list its segments.
func (c *collector) histogram() *FreeHistogram {
	if c.histAt == nil {
		return nil
	}
	h := c.acc.histogram()
	h.Policy = c.policy
	h.Index = c.histAt.Index
	h.TimeS = float64(c.histAt.TimeNS-c.t0) / 1e9
	h.ReservedBytes = c.histAt.ReservedBytes
	h.ActiveBytes = c.histAt.ActiveBytes
	return h
}
