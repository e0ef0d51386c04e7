package replay

import "testing"

// TestLiveMapReuse checks that a map given a released map's arrays holds
// none of its blocks, and works as a fresh one.
func TestLiveMapReuse(t *testing.T) {
	var m liveMap
	for k := uint64(1); k <= 5000; k++ {
		l, ok := m.Add(k * 512)
		if !ok {
			t.Fatalf("add %d failed", k)
		}
		l.size = k
	}
	size := len(m.keys)
	m.release()
	if m.Len() != 0 || len(m.keys) != 0 {
		t.Fatalf("released map: %d blocks, %d slots", m.Len(), len(m.keys))
	}
	var r liveMap
	r.reuse()
	if len(r.keys) != size {
		// Another test's map may be there, or none after a collection:
		// nothing left to check.
		t.Skipf("no released arrays to reuse (%d slots)", len(r.keys))
	}
	for k := uint64(1); k <= 5000; k++ {
		if _, ok := r.Get(k * 512); ok {
			t.Fatalf("reused map holds key %d", k*512)
		}
	}
	for k := uint64(1); k <= 3000; k++ {
		l, ok := r.Add(k * 1024)
		if !ok {
			t.Fatalf("add %d to the reused map failed", k)
		}
		l.size = k
	}
	for k := uint64(1); k <= 3000; k++ {
		if l, ok := r.Take(k * 1024); !ok || l.size != k {
			t.Fatalf("take %d: %v %v", k*1024, l, ok)
		}
	}
	if r.Len() != 0 {
		t.Fatalf("%d blocks left", r.Len())
	}
}
