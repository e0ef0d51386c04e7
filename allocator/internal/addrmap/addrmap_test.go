package addrmap

import (
	"math/rand/v2"
	"testing"
)

func TestMatchesGoMap(t *testing.T) {
	var m Map
	ref := map[uint64]int32{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		k := uint64(rng.IntN(5000)) * 512
		switch rng.IntN(5) {
		case 0, 1:
			v := int32(rng.IntN(1 << 30))
			m.Set(k, v)
			ref[k] = v
		case 2:
			_, want := ref[k]
			if got := m.Delete(k); got != want {
				t.Fatalf("step %d: Delete(%#x) = %v, want %v", i, k, got, want)
			}
			delete(ref, k)
		case 3:
			want, wok := ref[k]
			if got, ok := m.Take(k); ok != wok || got != want {
				t.Fatalf("step %d: Take(%#x) = %d,%v, want %d,%v", i, k, got, ok, want, wok)
			}
			delete(ref, k)
		case 4:
			v := int32(rng.IntN(1 << 30))
			_, had := ref[k]
			if got := m.Insert(k, v); got == had {
				t.Fatalf("step %d: Insert(%#x) = %v with the key present: %v", i, k, got, had)
			}
			if !had {
				ref[k] = v
			}
		}
		if m.Len() != len(ref) {
			t.Fatalf("step %d: Len %d, want %d", i, m.Len(), len(ref))
		}
	}
	for k, v := range ref {
		if got, ok := m.Get(k); !ok || got != v {
			t.Fatalf("Get(%#x) = %d,%v want %d", k, got, ok, v)
		}
	}
	if _, ok := m.Get(1); ok {
		t.Fatal("Get of an absent key succeeded")
	}
}

func BenchmarkMap(b *testing.B) {
	var m Map
	keys := benchKeys(false)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i&4095]
		m.Set(k, int32(i))
		m.Get(k)
		m.Delete(keys[(i+2048)&4095])
	}
}

func BenchmarkGoMap(b *testing.B) {
	m := map[uint64]int32{}
	keys := benchKeys(false)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i&4095]
		m[k] = int32(i)
		_ = m[k]
		delete(m, keys[(i+2048)&4095])
	}
}

func BenchmarkSlab(b *testing.B) {
	type live struct {
		addr, size, req uint64
		h               uint32
		freed           bool
	}
	var m Map
	var slab []live
	var spare []int32
	keys := benchKeys(true)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i&4095]
		var j int32
		if n := len(spare); n > 0 {
			j = spare[n-1]
		} else {
			j = int32(len(slab))
		}
		if m.Insert(k, j) {
			if n := len(spare); n > 0 {
				spare = spare[:n-1]
				slab[j] = live{addr: k, size: 512, req: 500, h: uint32(i)}
			} else {
				slab = append(slab, live{addr: k, size: 512, req: 500, h: uint32(i)})
			}
		}
		if j, ok := m.Get(keys[(i+1024)&4095]); ok {
			slab[j].freed = true
		}
		if j, ok := m.Take(keys[(i+2048)&4095]); ok {
			spare = append(spare, j)
			_ = slab[j]
		}
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
