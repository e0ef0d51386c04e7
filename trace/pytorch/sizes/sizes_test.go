package sizes

import (
	"math"
	"testing"
)

// TestRoundSize checks round_size against values worked out by hand from
// PyTorch's rules: multiples of 512 without divisions; with d divisions
// of a power-of-two interval, the next of its d steps, except below
// 512*d bytes and at powers of two.
func TestRoundSize(t *testing.T) {
	const M = 1 << 20
	var four Divisions
	for i := range four {
		four[i] = 4
	}
	var one Divisions
	one[2] = 1 // 1 means none
	var big Divisions
	big[15] = 1 << 63 // more steps than the bucket's floor has bytes
	cases := []struct {
		n    uint64
		d    *Divisions
		want uint64
	}{
		{0, nil, 512}, {1, nil, 512}, {511, nil, 512}, {512, nil, 512}, {513, nil, 1024},
		{M + 1, nil, M + 512}, {1300 * M, &four, 1536 * M}, {1024 * M, &four, 1024 * M},
		{1025 * M, &four, 1280 * M}, {5*M + 1, &four, 6 * M}, {1500, &four, 1536},
		{2000, &four, 2048}, {2049, &four, 2560}, {4*M + 1, &one, 4*M + 512},
		{1<<62 + 1, &big, 1 << 63},
		{math.MaxUint64, nil, math.MaxUint64}, {math.MaxUint64 - 100, nil, math.MaxUint64},
		{math.MaxUint64, &four, math.MaxUint64}, {1<<63 + 1, &big, 1<<63 + 1}, {3<<62 + 1, &four, 3<<62 + 1<<61}, {math.MaxUint64 - 10, &four, math.MaxUint64},
	}
	for _, c := range cases {
		if got := RoundSize(c.n, c.d); got != c.want {
			t.Errorf("RoundSize(%d, %v) = %d, want %d", c.n, c.d != nil, got, c.want)
		}
	}
}

func TestAllocationSize(t *testing.T) {
	const M = 1 << 20
	cases := []struct{ s, large, want uint64 }{
		{512, LargeBuffer, SmallBuffer}, {M, LargeBuffer, SmallBuffer}, {M + 512, LargeBuffer, LargeBuffer},
		{M + 512, 64 * M, 64 * M}, {10*M - 512, LargeBuffer, LargeBuffer}, {10 * M, LargeBuffer, 10 * M},
		{11*M + 1, LargeBuffer, 12 * M}, {math.MaxUint64 - 1, LargeBuffer, math.MaxUint64},
	}
	for _, c := range cases {
		if got := AllocationSize(c.s, c.large); got != c.want {
			t.Errorf("AllocationSize(%d, %d) = %d, want %d", c.s, c.large, got, c.want)
		}
	}
	if !Small(SmallSize) || Small(SmallSize+1) {
		t.Error("Small: the small pool serves up to SmallSize")
	}
}

func TestBucket(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want int
	}{{0, 0}, {1, 0}, {1<<21 - 1, 0}, {1 << 21, 1}, {1 << 35, 15}, {math.MaxUint64, 15}} {
		if got := Bucket(c.n); got != c.want {
			t.Errorf("Bucket(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

func BenchmarkRoundSize(b *testing.B) {
	var d Divisions
	d[3] = 4
	var s uint64
	for i := range b.N {
		s += RoundSize(uint64(i)*4099+1<<23, &d)
	}
	_ = s
}
