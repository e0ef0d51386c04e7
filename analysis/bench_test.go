package analysis

import "testing"

// BenchmarkCompare3Policies1M compares three policies on a trace of a
// million events (the goal: under 2 s on a 2-core machine).
func BenchmarkCompare3Policies1M(b *testing.B) {
	data := genTrace(b, 1_000_000, 42)
	opts := CompareOptions{Policies: []string{"caching", "expandable", "ideal"}, Settings: []Setting{}}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		c, err := Compare(opener(data), opts)
		if err != nil {
			b.Fatal(err)
		}
		if c.Trace.Events < 1_000_000 {
			b.Fatalf("%d events", c.Trace.Events)
		}
	}
}
