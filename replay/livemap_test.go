package replay

import (
	"math"
	"math/rand/v2"
	"testing"
)

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

func TestLiveMapMatchesGoMap(t *testing.T) {
	var m liveMap
	ref := map[uint64]live{}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200000; i++ {
		k := uint64(rng.IntN(5000)) * 512
		if k == 0 {
			k = math.MaxUint64 // the key kept apart
		}
		l := live{addr: k + uint64(rng.IntN(1<<20)), size: uint64(rng.IntN(1 << 30)), req: uint64(i), h: uint32(rng.IntN(1 << 30)), freed: rng.IntN(2) == 0}
		switch rng.IntN(4) {
		case 0:
			m.Set(k, l)
			ref[k] = l
		case 1:
			want, wok := ref[k]
			if got, ok := m.Take(k); ok != wok || got != want {
				t.Fatalf("step %d: Take(%#x) = %v,%v, want %v,%v", i, k, got, ok, want, wok)
			}
			delete(ref, k)
		case 2:
			_, had := ref[k]
			if got := m.Insert(k, l); got == had {
				t.Fatalf("step %d: Insert(%#x) = %v with the key present: %v", i, k, got, had)
			}
			if !had {
				ref[k] = l
			}
		case 3:
			want, wok := ref[k]
			p, ok := m.Get(k)
			if ok != wok || (ok && !sameLive(*p, want)) {
				t.Fatalf("step %d: Get(%#x) = %v, want %v,%v", i, k, ok, want, wok)
			}
			if ok {
				p.freed = !p.freed
				want.freed = !want.freed
				ref[k] = want
			}
		}
		if m.Len() != len(ref) {
			t.Fatalf("step %d: Len %d, want %d", i, m.Len(), len(ref))
		}
	}
	for k, v := range ref {
		if got, ok := m.Get(k); !ok || !sameLive(*got, v) {
			t.Fatalf("Get(%#x) = %v,%v want %v", k, got, ok, v)
		}
	}
}

func sameLive(a, b live) bool { return a == b }

func BenchmarkLiveMap(b *testing.B) {
	var m liveMap
	keys := benchKeys(true)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i&4095]
		m.Insert(k, live{addr: k, size: 512, req: 500, h: uint32(i)})
		if l, ok := m.Get(keys[(i+1024)&4095]); ok {
			l.freed = true
		}
		m.Take(keys[(i+2048)&4095])
	}
}

// benchKeys returns 4,096 addresses for the map benchmarks: 1,536 bytes
// apart, or random 512-byte-aligned ones in an 8 GiB range.
func benchKeys(random bool) []uint64 {
	keys := make([]uint64, 4096)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range keys {
		if random {
			keys[i] = 0x7f0000000000 + uint64(rng.IntN(1<<24))*512
		} else {
			keys[i] = 0x7f0000000000 + uint64(i)*1536
		}
	}
	return keys
}
