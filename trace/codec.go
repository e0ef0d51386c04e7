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
// it; the index is negative when b holds no valid uvarint at i (i out of
// b, the input ending within it, more than ten bytes, or a value past 64
// bits). It is the one uvarint decoder, small enough to be inlined (go
// build -gcflags=-m), one byte (the most common length) first.
func uvarint(b []byte, i int) (v uint64, next int) {
	if uint(i) < uint(len(b)) && b[i] < 0x80 {
		return uint64(b[i]), i + 1
	}
	for s := uint(0); uint(i) < uint(len(b)) && s < 64; s += 7 {
		c := uint64(b[i])
		i++
		v |= (c & 0x7f) << s
		if c < 0x80 {
			if c<<s>>s == c { // the tenth byte holds bit 63 alone
				return v, i
			}
			break
		}
	}
	return 0, -1
}

// uvarintShort decodes, when four bytes are left at b[i:], a uvarint of
// at most four bytes there with no branch on its length, and returns it
// with the index past it; the index is negative when it cannot (fewer
// bytes left, i negative, a longer uvarint), and uvarint decodes it or
// says it is bad. The events decoder's column loops call it for the
// lengths one to four, which a loop would mispredict.
func uvarintShort(b []byte, i int) (uint64, int) {
	if i >= 0 && i <= len(b)-4 {
		x := binary.LittleEndian.Uint32(b[i:])
		if l := bits.TrailingZeros32(^x&0x80808080) + 1; l <= 32 { // 8 times the length
			y := uint64(x) & (1<<l - 1)
			return y&0x7f | y>>1&0x3f80 | y>>2&0x1fc000 | y>>3&0xfe00000, i + l>>3
		}
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
