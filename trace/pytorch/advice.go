package pytorch

import (
	"math"
	"strconv"
)

// CapAdvice is what an import tells when release bursts right before a
// new segment look like a memory cap's retries (or garbage collection)
// and no cap was given: the run may have been capped, and an import that
// knows the cap tells those retries from empty_cache() calls.
type CapAdvice struct {
	// Bursts counts the release bursts (Summary.CapLikeBursts).
	Bursts int
	// PeakReservedBytes is the import's peak reserved (Summary.PeakReserved);
	// GPUTotalBytes the device's memory, 0 when not known.
	PeakReservedBytes, GPUTotalBytes uint64
	// Fraction is the least per-process memory fraction the cap can have
	// had: the peak reserved over the GPU's memory, rounded up at three
	// significant digits; "" when the GPU's memory is not known (or is
	// less than the peak).
	Fraction string
}

// CapAdvice returns the advice of the import s summarises, nil when it
// needs none: no cap-like bursts, or the cap was given
// (Options.MemoryCapBytes, or MemoryFraction with the GPU's memory).
func (s *Summary) CapAdvice() *CapAdvice {
	if s.CapLikeBursts == 0 || s.capKnown {
		return nil
	}
	a := &CapAdvice{Bursts: s.CapLikeBursts, PeakReservedBytes: s.PeakReserved}
	if s.Header != nil {
		a.GPUTotalBytes = s.Header.GPUTotalBytes
	}
	if t := a.GPUTotalBytes; t > 0 && s.PeakReserved > 0 && s.PeakReserved <= t {
		a.Fraction = leastFraction(s.PeakReserved, t)
	}
	return a
}

// leastFraction returns peak/total rounded up at 3 significant digits.
func leastFraction(peak, total uint64) string {
	f := float64(peak) / float64(total)
	scale := math.Pow(10, 2-math.Floor(math.Log10(f)))
	return strconv.FormatFloat(math.Ceil(f*scale)/scale, 'g', 3, 64)
}
