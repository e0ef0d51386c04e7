package analysis

import (
	"math/rand"
	"testing"
)

// feed adds values as one channel, event i at time i seconds.
func feed(s *sampler, vals []float64) {
	for i, v := range vals {
		s.add(int64(i), int64(i)*1e9, []float64{v})
	}
}

func TestSamplerKeepsEveryPointWhenShort(t *testing.T) {
	s := newSampler(1, 20)
	vals := []float64{3, 1, 4, 1, 5, 9, 2, 6}
	feed(s, vals)
	got := s.series(0, "x", "u", 0, 1)
	if len(got.Value) != len(vals) {
		t.Fatalf("got %d points, want %d", len(got.Value), len(vals))
	}
	for i, v := range vals {
		if got.Value[i] != v || got.Index[i] != int64(i) || got.TimeS[i] != float64(i) {
			t.Errorf("point %d = (%v, %d, %v), want (%v, %d, %v)", i, got.TimeS[i], got.Index[i], got.Value[i], float64(i), i, v)
		}
	}
}

func TestSamplerMinMaxPerBucket(t *testing.T) {
	// maxPoints 4: two buckets. 8 events: after merging, width 4:
	// bucket [0..3] min 1@1 max 4@2, bucket [4..7] min 2@6 max 9@5.
	s := newSampler(1, 4)
	feed(s, []float64{3, 1, 4, 1, 5, 9, 2, 6})
	got := s.series(0, "x", "u", 0, 1)
	wantIdx := []int64{1, 2, 5, 6}
	wantVal := []float64{1, 4, 9, 2}
	if len(got.Index) != len(wantIdx) {
		t.Fatalf("indices %v, want %v", got.Index, wantIdx)
	}
	for i := range wantIdx {
		if got.Index[i] != wantIdx[i] || got.Value[i] != wantVal[i] {
			t.Fatalf("points (%v, %v), want (%v, %v)", got.Index, got.Value, wantIdx, wantVal)
		}
	}
	if s.width != 4 {
		t.Errorf("width %d, want 4", s.width)
	}
}

func TestSamplerBoundsAndPeaks(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, n := range []int{1, 2, 999, 1000, 1001, 4096, 100003} {
		s := newSampler(2, 200)
		a := make([]float64, n)
		b := make([]float64, n)
		for i := range a {
			a[i] = rng.Float64()
			b[i] = -rng.Float64()
			s.add(int64(i), int64(i), []float64{a[i], b[i]})
		}
		for c, vals := range [][]float64{a, b} {
			got := s.series(c, "x", "u", 0, 1)
			if len(got.Value) > 200 {
				t.Fatalf("n=%d: %d points, over 200", n, len(got.Value))
			}
			if n <= 100 && len(got.Value) != n {
				t.Fatalf("n=%d: %d points, want all", n, len(got.Value))
			}
			lo, hi := vals[0], vals[0]
			loI, hiI := 0, 0
			for i, v := range vals {
				if v < lo {
					lo, loI = v, i
				}
				if v > hi {
					hi, hiI = v, i
				}
			}
			foundLo, foundHi := false, false
			for i, idx := range got.Index {
				if i > 0 && idx <= got.Index[i-1] {
					t.Fatalf("n=%d: indices not increasing: %v", n, got.Index)
				}
				if got.Value[i] != vals[idx] {
					t.Fatalf("n=%d: point at %d has %v, trace has %v", n, idx, got.Value[i], vals[idx])
				}
				foundLo = foundLo || int(idx) == loI
				foundHi = foundHi || int(idx) == hiI
			}
			if !foundLo || !foundHi {
				t.Errorf("n=%d channel %d: global min (%d) kept %v, max (%d) kept %v", n, c, loI, foundLo, hiI, foundHi)
			}
		}
		// Every event lies in exactly one bucket: bucket sizes sum to n.
		var sum int64
		for i := range s.buckets {
			if i < len(s.buckets)-1 {
				sum += s.width
			} else {
				sum += s.inCur
			}
		}
		if sum != int64(n) {
			t.Errorf("n=%d: buckets hold %d events", n, sum)
		}
	}
}

func TestSamplerScaleAndOrigin(t *testing.T) {
	s := newSampler(1, 10)
	s.add(0, 5e9, []float64{1 << 30})
	s.add(1, 7e9, []float64{3 << 30})
	got := s.series(0, "reserved", "GiB", 5e9, 1.0/gib)
	if got.TimeS[0] != 0 || got.TimeS[1] != 2 || got.Value[0] != 1 || got.Value[1] != 3 {
		t.Fatalf("got t=%v v=%v, want t=[0 2] v=[1 3]", got.TimeS, got.Value)
	}
}
