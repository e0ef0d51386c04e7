package synth

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/fragsim/fragsim/trace"
)

// NumBuckets is the number of log2 buckets of a Hist.
const NumBuckets = 65

// Hist counts values in log2 buckets: bucket i holds the values v with
// bits.Len64(v) == i, that is 2^(i-1) <= v < 2^i (bucket 0 holds 0).
type Hist [NumBuckets]uint64

// Bucket returns the bucket of v.
func Bucket(v uint64) int { return bits.Len64(v) }

// Add counts v.
func (h *Hist) Add(v uint64) { h[bits.Len64(v)]++ }

// Total returns the number of values counted.
func (h *Hist) Total() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Fractions returns each bucket's share of the total (all zero when empty).
func (h *Hist) Fractions() [NumBuckets]float64 {
	var f [NumBuckets]float64
	n := h.Total()
	if n == 0 {
		return f
	}
	for i, c := range h {
		f[i] = float64(c) / float64(n)
	}
	return f
}

// TotalVariation returns the total variation distance between the
// distributions a and b (bucket fractions): half the sum of the absolute
// differences, from 0 (the same) to 1 (disjoint).
func TotalVariation(a, b [NumBuckets]float64) float64 {
	d := 0.0
	for i := range a {
		if a[i] > b[i] {
			d += a[i] - b[i]
		} else {
			d += b[i] - a[i]
		}
	}
	return d / 2
}

// String renders the non-empty buckets as "lo..hi:fraction" pairs.
func (h *Hist) String() string {
	var b strings.Builder
	f := h.Fractions()
	for i, c := range h {
		if c == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if i == 0 {
			fmt.Fprintf(&b, "0:%.4f", f[i])
		} else {
			fmt.Fprintf(&b, "2^%d:%.4f", i-1, f[i])
		}
	}
	return b.String()
}

// Profile is the shape of a trace's requests: what the generator is
// calibrated on.
type Profile struct {
	// Sizes counts the requested bytes of every allocation.
	Sizes Hist
	// Lifetimes counts, for every allocation freed within the trace, the
	// allocations made after it and before its free. Counting allocations,
	// not events, makes it independent of which other events (device
	// events, markers) a producer records.
	Lifetimes Hist
	// Allocs is the number of allocations; Freed those freed in the trace.
	Allocs, Freed uint64
	// UnknownFrees counts frees of addresses not allocated in the trace
	// (blocks allocated before recording started).
	UnknownFrees uint64
	// LiveBytes is the requested bytes live at the end; PeakLiveBytes the
	// most live at once.
	LiveBytes, PeakLiveBytes uint64
}

// Profiler measures a Profile from events. It is a trace.Sink, so Generate
// can write into it directly; its memory is bounded by the live blocks.
type Profiler struct {
	p     Profile
	live  map[uint64]liveBlock
	nStr  trace.StringID
	nStk  trace.StackID
	index uint64 // allocations seen
}

type liveBlock struct{ index, size uint64 }

// NewProfiler returns an empty Profiler.
func NewProfiler() *Profiler { return &Profiler{live: make(map[uint64]liveBlock)} }

// WriteEvent counts e (alloc and free_requested events; others are ignored).
func (p *Profiler) WriteEvent(e trace.Event) error {
	switch e.Kind {
	case trace.KindAlloc:
		p.p.Sizes.Add(e.SizeBytes)
		p.p.Allocs++
		p.live[e.Addr] = liveBlock{index: p.index, size: e.SizeBytes}
		p.index++
		p.p.LiveBytes += e.SizeBytes
		p.p.PeakLiveBytes = max(p.p.PeakLiveBytes, p.p.LiveBytes)
	case trace.KindFreeRequested:
		b, ok := p.live[e.Addr]
		if !ok {
			p.p.UnknownFrees++
			return nil
		}
		delete(p.live, e.Addr)
		p.p.Lifetimes.Add(p.index - b.index - 1)
		p.p.Freed++
		p.p.LiveBytes -= b.size
	}
	return nil
}

// String returns a fresh ID for s (the Profiler keeps no tables).
func (p *Profiler) String(s string) trace.StringID {
	if s == "" {
		return trace.NoString
	}
	p.nStr++
	return p.nStr
}

// Stack returns a fresh ID for frames.
func (p *Profiler) Stack(frames []trace.Frame) trace.StackID {
	if len(frames) == 0 {
		return trace.NoStack
	}
	p.nStk++
	return p.nStk
}

// Profile returns what was measured so far.
func (p *Profiler) Profile() Profile { return p.p }
