package size

import (
	"math"
	"testing"
)

func TestRoundUp(t *testing.T) {
	for _, tt := range []struct {
		n, m, want uint64
		ok         bool
	}{
		{0, 512, 0, true},
		{1, 512, 512, true},
		{512, 512, 512, true},
		{513, 512, 1024, true},
		{math.MaxUint64 - 511, 512, math.MaxUint64 - 511, true},
		{math.MaxUint64 - 510, 512, 0, false},
		{math.MaxUint64, 512, 0, false},
		{math.MaxUint64, 1, math.MaxUint64, true},
		{1 << 62, 3, 1<<62 + 2, true},
	} {
		got, ok := RoundUp(tt.n, tt.m)
		if got != tt.want || ok != tt.ok {
			t.Errorf("RoundUp(%d, %d) = %d, %v; want %d, %v", tt.n, tt.m, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCeilDiv(t *testing.T) {
	for _, tt := range []struct{ n, m, want uint64 }{
		{0, 2, 0}, {1, 2, 1}, {2, 2, 1}, {3, 2, 2},
		{math.MaxUint64, 2 << 20, 1 << 43},
		{math.MaxUint64, 1, math.MaxUint64},
		{math.MaxUint64 - 1, math.MaxUint64, 1},
	} {
		if got := CeilDiv(tt.n, tt.m); got != tt.want {
			t.Errorf("CeilDiv(%d, %d) = %d, want %d", tt.n, tt.m, got, tt.want)
		}
	}
}
