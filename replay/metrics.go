package replay

// The metrics of a replay: peaks, the time-weighted fragmentation and the
// state at the peak of reserved bytes.

import (
	"github.com/fragsim/fragsim/trace"
)

// raisePeaks raises the peaks of active, allocated and requested bytes
// to the current ones.
func (e *engine) raisePeaks() {
	r := &e.res
	if e.active > r.PeakActiveBytes {
		r.PeakActiveBytes = e.active
	}
	if e.allocated > r.PeakAllocatedBytes {
		r.PeakAllocatedBytes = e.allocated
	}
	if e.requested > r.PeakRequestedBytes {
		r.PeakRequestedBytes = e.requested
	}
}

// measure updates the metrics after event idx.
func (e *engine) measure(ev *trace.Event, idx int64) {
	if e.reserved > e.peakReserved {
		e.newPeak(idx)
	}
	e.raisePeaks()
	e.measureTime(ev.TimeNS)
	if e.cfg.Observer != nil {
		s := &e.sample
		s.Index = idx
		s.TimeNS = ev.TimeNS
		s.Event = *ev
		s.ReservedBytes = e.reserved
		s.ActiveBytes = e.active
		s.AllocatedBytes = e.allocated
		s.RequestedBytes = e.requested
		s.Block, s.HasBlock = e.blk, e.hasBlk
		s.ds = nil
		if ds, err := e.device(ev.Device); err == nil {
			s.Policy = ds.policy
			s.ds = ds
		}
		e.cfg.Observer(s)
	}
	if e.cfg.Progress != nil && e.res.Events&(1<<20-1) == 0 {
		e.cfg.Progress(e.res.Events)
	}
}

// measureTime adds the state before an event at time t to the
// time-weighted sums, and the state after it to the per-event ones.
func (e *engine) measureTime(t int64) {
	// The state before this event held from the previous event's time
	// to this one's. A zero or negative time step adds nothing, so it is
	// added without a branch; a stretch is closed only on a positive one.
	dt := t - e.prevTime
	if dt < 0 || e.prevTime == 0 {
		dt = 0
	}
	if e.prevRes != e.tRes && dt > 0 {
		e.flushTime()
		e.tRes = e.prevRes
	}
	e.tW += dt
	e.tA += float64(int64(e.prevActive)) * float64(dt)
	if t != 0 {
		e.prevTime = t
	}
	e.prevActive, e.prevRes = e.active, e.reserved
	// The per-event sums are the fallback of a trace whose time never
	// advances: once it has, they will not be used.
	if e.tW > 0 || e.twTime > 0 {
		return
	}
	if e.reserved != e.cRes {
		e.flushCount()
		e.cRes = e.reserved
	}
	e.cN++
	e.cA += float64(int64(e.active))
}

// newPeak records a new peak of reserved bytes, reached at event idx.
func (e *engine) newPeak(idx int64) {
	e.peakReserved = e.reserved
	e.res.PeakReservedBytes = e.reserved
	e.res.Fragmentation.PeakIndex = idx
	e.atPeak()
}

func (e *engine) atPeak() {
	var largest, stranded uint64
	for _, d := range e.devs {
		st := d.policy.Stats()
		if st.LargestFreeBytes > largest {
			largest = st.LargestFreeBytes
		}
		stranded += st.StrandedBytes
	}
	e.atPeakActive = e.active
	fr := &e.res.Fragmentation
	freeCached := e.reserved - e.active
	if freeCached > 0 {
		fr.ExternalPct = 100 * (1 - float64(largest)/float64(freeCached))
		if fr.ExternalPct < 0 {
			fr.ExternalPct = 0
		}
	} else {
		fr.ExternalPct = 0
	}
	fr.InternalBytes = e.allocated - min(e.allocated, e.requested)
	fr.StrandedBytes = stranded
}

func (e *engine) updateStats(ds *devState) {
	var st uint64
	for _, d := range e.devs {
		if d.strand != nil {
			st += d.strand.StrandedBytes()
		} else {
			st += d.policy.Stats().StrandedBytes
		}
	}
	e.stranded = st
	if st > e.res.Fragmentation.MaxStrandedBytes {
		e.res.Fragmentation.MaxStrandedBytes = st
	}
}

// stretchPct returns Σ pct(active_i, reserved) over a stretch of constant
// reserved bytes, from the stretch's Σ weight_i and Σ active_i×weight_i.
func stretchPct(reserved uint64, weight, activeSum float64) float64 {
	if reserved == 0 {
		return 0
	}
	// Byte counts are below 2^63 (see pct).
	return 100 * (weight - activeSum/float64(int64(reserved)))
}

// flushTime closes the open time stretch.
func (e *engine) flushTime() {
	e.twSumTime += stretchPct(e.tRes, float64(e.tW), e.tA)
	e.twTime += e.tW
	e.tW, e.tA = 0, 0
}

// flushCount closes the open count stretch.
func (e *engine) flushCount() {
	e.twSumCount += stretchPct(e.cRes, float64(e.cN), e.cA)
	e.twCount += e.cN
	e.cN, e.cA = 0, 0
}

func pct(active, reserved uint64) float64 {
	if reserved == 0 {
		return 0
	}
	// Byte counts are below 2^63: the signed conversions give the same
	// values as the unsigned ones, in one instruction each.
	return 100 * (1 - float64(int64(active))/float64(int64(reserved)))
}
