package analysis

import (
	"math/bits"

	"github.com/fragsim/fragsim/trace"
)

// FreeHistogram is the histogram of a policy's free block sizes at one
// moment, in log2 bins.
type FreeHistogram struct {
	Policy        string    `json:"policy"`
	Index         int64     `json:"index"` // event index of the moment
	TimeS         float64   `json:"t_s"`
	ReservedBytes uint64    `json:"reserved_bytes"`
	ActiveBytes   uint64    `json:"active_bytes"`
	FreeBytes     uint64    `json:"free_bytes"`     // all free blocks
	StrandedBytes uint64    `json:"stranded_bytes"` // free blocks in segments that hold live blocks
	Segments      int64     `json:"segments"`
	Bins          []HistBin `json:"bins"` // contiguous, from the smallest to the largest non-empty bin
}

// HistBin is one log2 bin: blocks of LowBytes <= size < HighBytes.
type HistBin struct {
	Log2           int    `json:"log2"`
	LowBytes       uint64 `json:"low_bytes"`
	HighBytes      uint64 `json:"high_bytes"`
	Blocks         int64  `json:"blocks"`
	Bytes          uint64 `json:"bytes"`
	StrandedBlocks int64  `json:"stranded_blocks"`
	StrandedBytes  uint64 `json:"stranded_bytes"`
}

// Log2Class returns the log2 size class of n: k such that 2^k <= n < 2^(k+1)
// (0 for n = 0).
func Log2Class(n uint64) int {
	if n == 0 {
		return 0
	}
	return bits.Len64(n) - 1
}

// histAcc accumulates a free-block histogram without allocating.
type histAcc struct {
	bins     [64]HistBin
	free     uint64
	stranded uint64
	segments int64
}

func (a *histAcc) reset() { *a = histAcc{} }

// addSegment adds the free blocks of one segment.
func (a *histAcc) addSegment(seg trace.Segment) {
	a.segments++
	live := false
	for _, b := range seg.Blocks {
		if b.State != trace.BlockInactive {
			live = true
			break
		}
	}
	for _, b := range seg.Blocks {
		if b.State != trace.BlockInactive || b.SizeBytes == 0 {
			continue
		}
		k := Log2Class(b.SizeBytes)
		bin := &a.bins[k]
		bin.Blocks++
		bin.Bytes += b.SizeBytes
		a.free += b.SizeBytes
		if live {
			bin.StrandedBlocks++
			bin.StrandedBytes += b.SizeBytes
			a.stranded += b.SizeBytes
		}
	}
}

// histogram returns the accumulated histogram.
func (a *histAcc) histogram() *FreeHistogram {
	h := &FreeHistogram{FreeBytes: a.free, StrandedBytes: a.stranded, Segments: a.segments}
	lo, hi := -1, -1
	for k := range a.bins {
		if a.bins[k].Blocks > 0 {
			if lo < 0 {
				lo = k
			}
			hi = k
		}
	}
	if lo < 0 {
		return h
	}
	for k := lo; k <= hi; k++ {
		b := a.bins[k]
		b.Log2 = k
		b.LowBytes = 1 << uint(k)
		if k < 63 {
			b.HighBytes = 1 << uint(k+1)
		} else {
			b.HighBytes = ^uint64(0)
		}
		h.Bins = append(h.Bins, b)
	}
	return h
}

// FreeHistogramOf builds the histogram of the free blocks of segs.
func FreeHistogramOf(segs []trace.Segment) *FreeHistogram {
	var a histAcc
	for _, s := range segs {
		a.addSegment(s)
	}
	return a.histogram()
}
