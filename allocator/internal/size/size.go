// Package size is the overflow-safe size arithmetic of the allocator
// policies: a request's size comes from a trace and may be any 64-bit
// value, so rounding it must not wrap around.
package size

import "math"

// RoundUp returns n rounded up to a multiple of m (m > 0), and false when
// the result does not fit in 64 bits.
func RoundUp(n, m uint64) (uint64, bool) {
	r := n % m
	if r == 0 {
		return n, true
	}
	if n > math.MaxUint64-(m-r) {
		return 0, false
	}
	return n + (m - r), true
}

// CeilDiv returns n/m rounded up (m > 0); it cannot overflow.
func CeilDiv(n, m uint64) uint64 {
	q := n / m
	if n%m != 0 {
		q++
	}
	return q
}
