package replay

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// TestLayoutDriverProbes replays call sequences that the CUDA driver ran in
// fresh processes (testdata/driver_probe_*.json: cuMemAlloc of sizes and
// cuMemFree of earlier allocations, with the address the driver gave each)
// through a device with no recorded events, and checks that every segment
// lies at the driver's offset from the first one. The sequences were not
// used to derive the layout; together they exercise best fit inside the
// newest chunk with ties, chunk release, and gaps reused only when strictly
// larger.
func TestLayoutDriverProbes(t *testing.T) {
	files, err := filepath.Glob("testdata/driver_probe_*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no probe sequences: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var p struct {
				Ops [][]any `json:"ops"`
			}
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			if err := dec.Decode(&p); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			d := newDevice(nil, 0, 0, 0, 0)
			d.compare = false
			type seg struct{ addr, size uint64 }
			got := map[int]seg{}
			var first, driverFirst uint64
			n := 0
			for i, op := range p.Ops {
				switch op[0] {
				case "a":
					size, driver := num(t, op[1]), num(t, op[2])
					addr, ok := d.Malloc(size, 0)
					if !ok {
						t.Fatalf("op %d: %d bytes refused", i, size)
					}
					if n == 0 {
						first, driverFirst = addr, driver
					}
					n++
					if addr-first != driver-driverFirst {
						t.Errorf("op %d: %d MiB at offset %d MiB, the driver's %d MiB", i, size>>20,
							int64(addr-first)>>20, int64(driver-driverFirst)>>20)
					}
					got[i] = seg{addr, size}
				case "f":
					j := num(t, op[1])
					s, ok := got[int(j)]
					if !ok {
						t.Fatalf("op %d: free of op %d, no allocation", i, j)
					}
					d.Free(s.addr, s.size)
				}
			}
			if n < 50 {
				t.Fatalf("%d allocations, want a long sequence", n)
			}
		})
	}
}

// num returns a probe file's number, decoded as a json.Number.
func num(t *testing.T, v any) uint64 {
	t.Helper()
	n, _ := v.(json.Number)
	i, err := n.Int64()
	if err != nil || i < 0 {
		t.Fatalf("bad number %v", v)
	}
	return uint64(i)
}

// TestLayoutRules walks the layout's rules one call at a time, offsets in
// MiB from the context's first chunk.
func TestLayoutRules(t *testing.T) {
	const mib = 1 << 20
	l := newDriverLayout()
	type seg struct {
		off   int64
		chunk int
		size  uint64
	}
	segs := map[string]seg{}
	steps := []struct {
		name string
		mib  uint64 // 0: free the segment named
		want int64
	}{
		{"s", 2, 30},    // the context's newest chunk: its free 2 MiB
		{"A", 40, -448}, // no hole fits: a chunk of 64 MiB below -384
		{"B", 30, -480}, // a chunk of 32 MiB below the lowest
		{"C", 20, -408}, // the newest chunk that fits: A's tail, not the context's 24 MiB
		{"D", 2, -450},  // B's tail
		{"A", 0, 0},     // A's chunk: a 40 MiB hole, C, a 4 MiB tail
		{"E", 3, -388},  // rounded to 4 MiB: the smallest hole that fits
		{"C", 0, 0},     //
		{"E", 0, 0},     // A's chunk is empty: released, a 64 MiB gap
		{"F", 64, -544}, // the gap is not larger than 64 MiB: below the lowest
		{"G", 30, -416}, // the top of the gap
		{"H", 2, -386},  // G's tail
		{"F", 0, 0},     // the lowest chunk released: its range is free below B
		{"I", 96, -576}, // directly below B
		{"J", 1, 104},   // 2 MiB: every newer chunk is full, the context's other one is not
	}
	for i, s := range steps {
		if s.mib == 0 {
			g := segs[s.name]
			l.free(g.chunk, g.off, g.size)
			continue
		}
		off, c := l.alloc(s.mib * mib)
		if off != s.want*mib {
			t.Errorf("step %d: %s of %d MiB at %d MiB, want %d MiB", i, s.name, s.mib, off/mib, s.want)
		}
		segs[s.name] = seg{off, c, s.mib * mib}
	}
}

// TestLayoutAnchor checks that laid-out segments lie where the recording's
// driver would have put them: the first segment's recorded address fixes
// the offsets.
func TestLayoutAnchor(t *testing.T) {
	const mib = 1 << 20
	const rec = 0x7f73b3e00000
	e := &engine{}
	d := newDevice(e, 0, 0, 0, 0)
	d.rec = []trace.Event{{Kind: trace.KindSegmentAlloc, Addr: rec, SizeBytes: 2 * mib}}
	if a, _ := d.Malloc(2*mib, 0); a != rec {
		t.Fatalf("first segment at %#x, want the recorded %#x", a, uint64(rec))
	}
	d.compare = false
	// The first 2 MiB lies 30 MiB into the context's chunk; a 20 MiB one
	// goes 104 MiB into it, 74 MiB above.
	if a, _ := d.Malloc(20*mib, 0); a != rec+74*mib {
		t.Errorf("laid-out segment at %#x, want %#x", a, uint64(rec+74*mib))
	}
}

// TestGapSet checks the gap set against a plain list under random inserts,
// removals and takes.
func TestGapSet(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var g gapSet
	type gap struct {
		off  int64
		size uint64
	}
	var plain []gap // by offset
	for step := 0; step < 20000; step++ {
		switch rng.Intn(4) {
		case 0, 1:
			off := int64(rng.Intn(1000)) * 64
			size := uint64(rng.Intn(3)+1) * 16
			free := true
			for _, p := range plain {
				if off < p.off+int64(p.size) && p.off < off+int64(size) {
					free = false
				}
			}
			if free {
				g.insert(off, size)
				i := 0
				for i < len(plain) && plain[i].off < off {
					i++
				}
				plain = append(plain[:i], append([]gap{{off, size}}, plain[i:]...)...)
			}
		case 2:
			if len(plain) > 0 {
				i := rng.Intn(len(plain))
				if s, ok := g.at(plain[i].off); !ok || s != plain[i].size {
					t.Fatalf("step %d: at(%d) = %d, %v, want %d", step, plain[i].off, s, ok, plain[i].size)
				}
				if o, ok := g.endingAt(plain[i].off + int64(plain[i].size)); !ok || o != plain[i].off {
					t.Fatalf("step %d: endingAt: %d, %v, want %d", step, o, ok, plain[i].off)
				}
				g.remove(plain[i].off)
				plain = append(plain[:i], plain[i+1:]...)
			}
		case 3:
			n := uint64(rng.Intn(48))
			want := -1
			for i := len(plain) - 1; i >= 0; i-- {
				if plain[i].size > n {
					want = i
					break
				}
			}
			off, ok := g.takeTop(n)
			if ok != (want >= 0) {
				t.Fatalf("step %d: takeTop(%d) found %v, want %v", step, n, ok, want >= 0)
			}
			if ok {
				p := &plain[want]
				if off != p.off+int64(p.size-n) {
					t.Fatalf("step %d: takeTop(%d) = %d, want %d", step, n, off, p.off+int64(p.size-n))
				}
				p.size -= n
			}
		}
	}
}
