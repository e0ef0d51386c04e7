// Package sizes holds PyTorch CUDA caching allocator's size rules: how a
// request is rounded into a block (round_size, with
// roundup_power2_divisions), which pool a block comes from, and how large a
// segment a block that no cached one serves makes the allocator reserve
// (get_allocation_size). The snapshot importer uses them for blocks a
// snapshot lost, the caching policy for every request it replays; both
// must agree with PyTorch byte for byte.
package sizes

import (
	"math"
	"math/bits"
)

// The constants of PyTorch's CUDACachingAllocator.
const (
	MinBlockSize       = 512      // kMinBlockSize: every block is a multiple of it
	SmallSize          = 1 << 20  // kSmallSize: the largest rounded size the small pool serves
	SmallBuffer        = 2 << 20  // kSmallBuffer: a small-pool segment (and an expandable small page)
	MinLargeAlloc      = 10 << 20 // kMinLargeAlloc: from it, a segment is the rounded request itself
	LargeBuffer        = 20 << 20 // kLargeBuffer: the default large_segment_size
	RoundLarge         = 2 << 20  // kRoundLarge: large segments are multiples of it
	NumDivisionBuckets = 16       // kRoundUpPowerOfTwoIntervals
)

// Divisions is roundup_power2_divisions: the divisions per size bucket,
// bucket i covering [2^i MiB, 2^(i+1) MiB) (bucket 0 also every size
// below, the last one every size above); 0 or 1 means none.
type Divisions = [NumDivisionBuckets]uint64

// Bucket returns the index in Divisions of the bucket of size n.
func Bucket(n uint64) int {
	logSize := 63 - bits.LeadingZeros64(n|1)
	return min(max(logSize-20, 0), NumDivisionBuckets-1)
}

// RoundSize is PyTorch's round_size: the block size a request of n bytes
// gets, with the divisions d (nil: none). A request too large to round
// without overflowing gets math.MaxUint64, a size no device can serve.
func RoundSize(n uint64, d *Divisions) uint64 {
	if n < MinBlockSize {
		return MinBlockSize
	}
	var div uint64
	if d != nil {
		div = d[Bucket(n)]
	}
	if div > 1 && n > MinBlockSize*div {
		if n&(n-1) == 0 {
			return n
		}
		floor := uint64(1) << (63 - bits.LeadingZeros64(n))
		step := floor >> (63 - bits.LeadingZeros64(div))
		if step == 0 {
			if floor > math.MaxUint64/2 {
				return math.MaxUint64
			}
			return floor << 1
		}
		return roundUp(n, step)
	}
	return roundUp(n, MinBlockSize)
}

// roundUp returns n rounded up to a multiple of step (a power of two), or
// math.MaxUint64 when that overflows.
func roundUp(n, step uint64) uint64 {
	f := n &^ (step - 1)
	if f == n {
		return n
	}
	if f > math.MaxUint64-step {
		return math.MaxUint64
	}
	return f + step
}

// Small reports whether a block of rounded size s comes from the small
// pool (else the large one).
func Small(s uint64) bool { return s <= SmallSize }

// AllocationSize is PyTorch's get_allocation_size: the size of the segment
// reserved for a block of rounded size s that no cached block serves, with
// large_segment_size largeSegment (LargeBuffer by default). A size too
// large to round gets math.MaxUint64.
func AllocationSize(s, largeSegment uint64) uint64 {
	switch {
	case Small(s):
		return SmallBuffer
	case s < MinLargeAlloc:
		return largeSegment
	default:
		return roundUp(s, RoundLarge)
	}
}
