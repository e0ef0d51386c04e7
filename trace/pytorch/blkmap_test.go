package pytorch

import (
	"math/rand/v2"
	"testing"
)

// TestBlkMap checks blkMap against a Go map through random puts, gets and
// deletes of clustered addresses (block-aligned, address 0 included), many
// of which probe past each other.
func TestBlkMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var m blkMap
	want := map[uint64]rblk{}
	for i := range 200000 {
		a := uint64(r.IntN(3000)) * 512
		if r.IntN(4) == 0 {
			a = uint64(r.IntN(64)) << 30
		}
		switch r.IntN(3) {
		case 0:
			b := rblk{size: uint64(i), req: a, pending: i%2 == 0}
			m.put(a, b)
			want[a] = b
		case 1:
			m.del(a)
			delete(want, a)
		}
		got, ok := m.get(a)
		w, wok := want[a]
		if ok != wok || got != w {
			t.Fatalf("op %d: get(%#x) = %v %v, want %v %v", i, a, got, ok, w, wok)
		}
		if m.len() != len(want) {
			t.Fatalf("op %d: %d blocks, want %d", i, m.len(), len(want))
		}
	}
	seen := 0
	m.each(func(a uint64, b rblk) {
		if want[a] != b {
			t.Fatalf("each: %#x is %v, want %v", a, b, want[a])
		}
		seen++
	})
	if seen != len(want) {
		t.Fatalf("each gave %d blocks, want %d", seen, len(want))
	}
}
