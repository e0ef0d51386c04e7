package trace

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/bits"
)

// The raw codec: varints, chunk framing and the column layout of event
// chunks (encode.go, decode.go, table.go). It knows the wire format and
// nothing of files or validation beyond what decoding needs.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// uvarint decodes the uvarint at b[i:] and returns it with the index past
// it; the index is negative when b holds no valid uvarint at i.
func uvarint(b []byte, i int) (uint64, int) {
	if i < 0 || i+binary.MaxVarintLen64 > len(b) {
		return uvarintTail(b, i)
	}
	b = b[i : i+binary.MaxVarintLen64]
	c := uint64(b[0])
	if c < 0x80 {
		return c, i + 1
	}
	v := c & 0x7f
	c = uint64(b[1])
	if c < 0x80 {
		return v | c<<7, i + 2
	}
	v |= (c & 0x7f) << 7
	c = uint64(b[2])
	if c < 0x80 {
		return v | c<<14, i + 3
	}
	v |= (c & 0x7f) << 14
	c = uint64(b[3])
	if c < 0x80 {
		return v | c<<21, i + 4
	}
	v |= (c & 0x7f) << 21
	c = uint64(b[4])
	if c < 0x80 {
		return v | c<<28, i + 5
	}
	v |= (c & 0x7f) << 28
	c = uint64(b[5])
	if c < 0x80 {
		return v | c<<35, i + 6
	}
	v |= (c & 0x7f) << 35
	c = uint64(b[6])
	if c < 0x80 {
		return v | c<<42, i + 7
	}
	v |= (c & 0x7f) << 42
	c = uint64(b[7])
	if c < 0x80 {
		return v | c<<49, i + 8
	}
	v |= (c & 0x7f) << 49
	c = uint64(b[8])
	if c < 0x80 {
		return v | c<<56, i + 9
	}
	v |= (c & 0x7f) << 56
	c = uint64(b[9])
	if c > 1 {
		return 0, -1
	}
	return v | c<<63, i + 10
}

// uvarint4 decodes the uvarint of at most four bytes at the start of x, read
// little-endian, without a branch; one of x's four high bits must be clear.
// It returns the value and the uvarint's length.
func uvarint4(x uint32) (uint64, int) {
	l := bits.TrailingZeros32(^x&0x80808080) + 1 // 8 times the length
	y := uint64(x) & (1<<l - 1)
	return y&0x7f | y>>1&0x3f80 | y>>2&0x1fc000 | y>>3&0xfe00000, l >> 3
}

// uvarintTail decodes a uvarint near the end of b.
func uvarintTail(b []byte, i int) (uint64, int) {
	if i < 0 {
		return 0, -1
	}
	var v uint64
	for s := uint(0); s < 64; s += 7 {
		if i >= len(b) {
			return 0, -1
		}
		c := b[i]
		i++
		if c < 0x80 {
			if s == 63 && c > 1 {
				return 0, -1
			}
			return v | uint64(c)<<s, i
		}
		v |= uint64(c&0x7f) << s
	}
	return 0, -1
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func absDelta(d int64) uint64 {
	if d < 0 {
		return uint64(-d) // -MinInt64 wraps to MinInt64, whose uint64 is its magnitude
	}
	return uint64(d)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// gcdStep is gcd(g, x), for a running gcd g: most values are multiples of
// it, which one test tells (a mask when g is a power of two: addresses
// and many sizes), where gcd divides twice.
func gcdStep(g, x uint64) uint64 {
	if g&(g-1) == 0 {
		if x&(g-1) == 0 {
			return g
		}
	} else if x%g == 0 {
		return g
	}
	return gcd(g, x)
}

// unitOf turns a gcd into a usable unit: 1 when nothing divides, and at
// most MaxInt64 so that signed division stays exact.
func unitOf(g uint64) uint64 {
	if g == 0 || g > math.MaxInt64 {
		return 1
	}
	return g
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
