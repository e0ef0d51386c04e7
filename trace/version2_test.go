package trace

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// formatVersion makes the writer write format version v (1 to Version),
// for tests of older versions' readers.
func formatVersion(v int) WriterOption {
	return func(o *writerOptions) { o.version = min(max(v, 1), Version) }
}

// headerLen is the number of uvarints of the column header of version v.
func headerLen(v int) int {
	n, _ := colHeaderLen(v)
	return n
}

// payloadColumns decodes the column header of an events payload of format
// version v: the time mode (zigzag for version 1) and the column lengths.
func payloadColumns(t *testing.T, p []byte, v int) (timeMode uint64, lens []uint64) {
	t.Helper()
	var hdr []uint64
	i := 0
	for range headerLen(v) {
		var x uint64
		if x, i = uvarint(p, i); i < 0 {
			t.Fatal("bad column header")
		}
		hdr = append(hdr, x)
	}
	if v == 1 {
		return timeZigzag, hdr[4:]
	}
	return hdr[4], hdr[5:]
}

// decodePayload decodes an events payload of format version v.
func decodePayload(t *testing.T, p []byte, v, n int) []Event {
	t.Helper()
	var d eventDecoder
	if err := d.start(p, v, 1<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	out := make([]Event, n)
	if m, err := d.next(out); err != nil || m != n {
		t.Fatalf("decoded %d of %d events: %v", m, n, err)
	}
	return out
}

// TestVersion2Repeat checks that a free_completed with the address and
// size of the event before it encodes neither, in version 2 only, and that
// free_completed events that differ from the event before them (or lack
// one) read back as written.
func TestVersion2Repeat(t *testing.T) {
	evs := []Event{
		{Kind: KindFreeCompleted, TimeNS: 1000},                                        // repeats the zero Event
		{Kind: KindFreeCompleted, TimeNS: 1000, Addr: 0x7f0000000000, SizeBytes: 4096}, // differs from it
		{Kind: KindAlloc, TimeNS: 2000, Addr: 0x7f0000200000, SizeBytes: 512},
		{Kind: KindFreeRequested, TimeNS: 3000, Addr: 0x7f0000200000, SizeBytes: 512},
		{Kind: KindFreeCompleted, TimeNS: 3000, Addr: 0x7f0000200000, SizeBytes: 512}, // a repeat
		{Kind: KindFreeRequested, TimeNS: 4000, Addr: 0x7f0000400000, SizeBytes: 2048},
		{Kind: KindFreeCompleted, TimeNS: 5000, Addr: 0x7f0000400000, SizeBytes: 1024}, // size differs
		{Kind: KindFreeRequested, TimeNS: 6000, Addr: 0x7f0000400000, SizeBytes: 2048},
		{Kind: KindFreeCompleted, TimeNS: 7000, Addr: 0x7f0000600000, SizeBytes: 2048}, // address differs
		{Kind: KindMarker, TimeNS: 8000, Marker: MarkerStep, Text: 1},
		{Kind: KindFreeCompleted, TimeNS: 9000}, // repeats the marker's zero address and size
		{Kind: KindOOM, TimeNS: 9500, SizeBytes: 1 << 30, Aux: 5},
		{Kind: KindFreeCompleted, TimeNS: 9600, SizeBytes: 1 << 30}, // repeats the oom
		{Kind: KindFreeRequested, TimeNS: 9700, Addr: 0x7f0000800000, SizeBytes: 1024},
		{Kind: KindFreeCompleted, TimeNS: 9800}, // zero after non-zero: encoded
	}
	var ee eventEncoder
	for _, v := range []int{1, 2} {
		p := ee.encode(nil, evs, v)
		if got := decodePayload(t, p, v, len(evs)); !slices.Equal(got, evs) {
			t.Fatalf("version %d: read\n%v\nwant\n%v", v, got, evs)
		}
	}
	// Version 2 drops the address and size of the three repeats only.
	_, l1 := payloadColumns(t, ee.encode(nil, evs, 1), 1)
	sizes := 0
	for _, e := range evs {
		if e.Kind != KindMarker {
			sizes++
		}
	}
	_, l2 := payloadColumns(t, ee.encode(nil, evs, 2), 2)
	if got, want := l2[2], uint64(sizes-3); got > want+8 || l1[2] <= l2[2] {
		t.Errorf("size column: %d bytes in version 2 (%d in version 1), want about %d", got, l1[2], want)
	}
	p := ee.encode(nil, evs, 2)
	i := 0
	for range headerLen(2) {
		_, i = uvarint(p, i)
	}
	for j, tb := range p[i : i+len(evs)] {
		extra := tb&flagExtra != 0
		repeat := j == 0 || j == 4 || j == 10 || j == 12
		if evs[j].Kind == KindFreeCompleted && extra == repeat {
			t.Errorf("event %d (%v): extra mask %v, want %v", j, evs[j], extra, !repeat)
		}
	}
}

// TestVersion2SizeClasses checks that version 2 takes an address's delta
// from the last address of its size class: small blocks, large ones and
// larger ones interleaved cost the delta within their class (1, 2 and 3
// bytes here, in 512-byte units), not the distance between classes (5).
func TestVersion2SizeClasses(t *testing.T) {
	var evs []Event
	small, large, huge := uint64(0x7f0000000000), uint64(0x7f1000000000), uint64(0x7f2000000000)
	for i := range uint64(300) {
		t := int64(i) * 3000
		evs = append(evs,
			Event{Kind: KindAlloc, TimeNS: t, Addr: small + i*512, SizeBytes: 512},
			Event{Kind: KindAlloc, TimeNS: t + 1000, Addr: large + i*(2<<20), SizeBytes: 2 << 20},
			Event{Kind: KindAlloc, TimeNS: t + 2000, Addr: huge + i*(64<<20), SizeBytes: 64 << 20})
	}
	var ee eventEncoder
	for _, v := range []int{1, 2} {
		p := ee.encode(nil, evs, v)
		if got := decodePayload(t, p, v, len(evs)); !slices.Equal(got, evs) {
			t.Fatalf("version %d: events differ", v)
		}
		_, lens := payloadColumns(t, p, v)
		if v == 2 && lens[1] > 2*uint64(len(evs))+3*8 {
			t.Errorf("version 2: %d address bytes for %d events", lens[1], len(evs))
		}
		if v == 1 && lens[1] < 5*uint64(len(evs)) {
			t.Errorf("version 1: %d address bytes for %d events, expected the classes' distance in each", lens[1], len(evs))
		}
	}
	if got := []int{sizeClass(0), sizeClass(1 << 20), sizeClass(1<<20 + 1), sizeClass(10 << 20), sizeClass(10<<20 + 1), sizeClass(^uint64(0))}; !slices.Equal(got, []int{0, 0, 1, 1, 2, 2}) {
		t.Errorf("size classes %v", got)
	}
}

// TestVersion2TimeModes checks that a chunk whose times never go back
// holds unsigned deltas, that one going back holds zigzag'd ones, and
// that both read back, as do the extreme deltas.
func TestVersion2TimeModes(t *testing.T) {
	var ee eventEncoder
	fwd := []Event{{Kind: KindEmptyCache, TimeNS: 5000}, {Kind: KindEmptyCache, TimeNS: 5000}, {Kind: KindEmptyCache, TimeNS: 9000}}
	back := []Event{{Kind: KindEmptyCache, TimeNS: 5000}, {Kind: KindEmptyCache, TimeNS: 4000}}
	wide := []Event{{Kind: KindEmptyCache, TimeNS: -1 << 63}, {Kind: KindEmptyCache, TimeNS: 1<<63 - 1}, {Kind: KindEmptyCache, TimeNS: -1 << 63}}
	for _, c := range []struct {
		evs  []Event
		mode uint64
	}{{fwd, timeUnsigned}, {back, timeZigzag}, {wide, timeZigzag}} {
		p := ee.encode(nil, c.evs, 2)
		if mode, _ := payloadColumns(t, p, 2); mode != c.mode {
			t.Errorf("%v: time mode %d, want %d", c.evs, mode, c.mode)
		}
		if got := decodePayload(t, p, 2, len(c.evs)); !slices.Equal(got, c.evs) {
			t.Errorf("read %v, want %v", got, c.evs)
		}
	}
	p := ee.encode(nil, fwd, 2)
	i := 0
	for j := range headerLen(2) {
		if j == 4 {
			p[i] = 2 // an unknown time mode
		}
		_, i = uvarint(p, i)
	}
	var d eventDecoder
	if err := d.start(p, 2, 1, 1); err == nil || err.msg != "events chunk: unknown time mode 2" {
		t.Errorf("unknown time mode: %v", err)
	}
}

// TestVersion1StillReads checks that traces written in format version 1
// read back as written, and that the writer's default is the newest
// version, which is smaller on PyTorch-like streams.
func TestVersion1StillReads(t *testing.T) {
	var sizes [Version + 1]int
	for _, v := range []int{1, Version} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, nil, formatVersion(v), ChunkEvents(4096))
		if err != nil {
			t.Fatal(err)
		}
		evs := transformerStream(rand.New(rand.NewPCG(9, 9)), w, 20000)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if r.Version() != v {
			t.Errorf("version %d written, %d read", v, r.Version())
		}
		_, got, err := ReadAll(bytes.NewReader(buf.Bytes()))
		if err != nil || !slices.Equal(got, evs) {
			t.Fatalf("version %d: %d events read (%v), want %d", v, len(got), err, len(evs))
		}
		sizes[v] = buf.Len()
	}
	var def bytes.Buffer
	w, _ := NewWriter(&def, nil)
	w.Close()
	if def.Bytes()[len(Magic)] != Version {
		t.Errorf("default writer writes version %d", def.Bytes()[len(Magic)])
	}
	if sizes[Version] >= sizes[1] {
		t.Errorf("version %d: %d bytes, version 1: %d", Version, sizes[Version], sizes[1])
	}
}

// TestVersion2Ring checks that a free_requested of one of the latest
// ringSize-1 allocations of its chunk refers to it in the ring column,
// and that others (older, another size, before any allocation, or never
// allocated) encode their address and size; all read back as written.
func TestVersion2Ring(t *testing.T) {
	var evs []Event
	tm := int64(0)
	add := func(k Kind, addr, size uint64) {
		tm += 1000
		evs = append(evs, Event{Kind: k, TimeNS: tm, Addr: addr, SizeBytes: size})
	}
	add(KindFreeRequested, 0x7f0000000000, 512) // nothing allocated yet
	const base = 0x7f1000000000
	const n = ringSize + 150
	for i := range uint64(n) {
		add(KindAlloc, base+i<<20, 4096+i)
	}
	// References 0, 1, 200 and ringSize-2; ringSize-1 and more are out
	// of reach.
	refs := 0
	for _, j := range []uint64{0, 1, 200, ringSize - 2, ringSize - 1, n - 11, n - 1} {
		i := n - 1 - j
		add(KindFreeRequested, base+i<<20, 4096+i)
		if j < ringSize-1 {
			refs++
		}
		add(KindFreeCompleted, base+i<<20, 4096+i)
	}
	add(KindFreeRequested, base+300<<20, 99) // another size
	add(KindFreeRequested, 0x7f2000000000, 4096)
	var ee eventEncoder
	p := ee.encode(nil, evs, 2)
	if got := decodePayload(t, p, 2, len(evs)); !slices.Equal(got, evs) {
		t.Fatalf("events differ")
	}
	_, lens := payloadColumns(t, p, 2)
	// References 0 and 1 take a byte, the other two two. (The writer's
	// index could lose a reference to a later allocation of the same
	// slot; these addresses have slots of their own.)
	if want := uint64(2 + (refs-2)*2); refs != 4 || lens[4] != want {
		t.Errorf("ring column of %d bytes, want %d for %d references", lens[4], want, refs)
	}
	hdr := headerLen(2)
	i := 0
	for range hdr {
		_, i = uvarint(p, i)
	}
	extras := 0
	for j, tb := range p[i : i+len(evs)] {
		if evs[j].Kind == KindFreeRequested && tb&flagExtra != 0 {
			extras++
		}
	}
	if want := 1 + 7 - refs + 2; extras != want {
		t.Errorf("%d free_requested encode their address and size, want %d", extras, want)
	}
}

// TestVersion2RingCorrupt checks that a reference beyond the chunk's
// allocations is an error naming the event.
func TestVersion2RingCorrupt(t *testing.T) {
	evs := []Event{
		{Kind: KindAlloc, TimeNS: 1000, Addr: 0x7f0000000000, SizeBytes: 512},
		{Kind: KindAlloc, TimeNS: 2000, Addr: 0x7f0000000200, SizeBytes: 512},
		{Kind: KindFreeRequested, TimeNS: 3000, Addr: 0x7f0000000000, SizeBytes: 512},
	}
	var ee eventEncoder
	p := ee.encode(nil, evs, 2)
	if p[len(p)-1] != 1 { // the ring column: the second latest allocation
		t.Fatalf("ring column ends with %d, want 1", p[len(p)-1])
	}
	p[len(p)-1] = 2
	var d eventDecoder
	if err := d.start(p, 2, 1, 1); err != nil {
		t.Fatal(err)
	}
	out := make([]Event, len(evs))
	n, err := d.next(out)
	if err == nil || n != 2 || err.event != 2 || err.msg != "allocation reference beyond the chunk's latest allocations: 2" {
		t.Errorf("decoded %d events, error %v (event %d)", n, err, err.event)
	}
}

// TestUvarintLen checks uvarintLen against the encoder at every bit length.
func TestUvarintLen(t *testing.T) {
	for s := range 64 {
		for _, v := range []uint64{1 << s, 1<<s - 1, 1<<s + 1} {
			if got, want := uvarintLen(v), len(binary.AppendUvarint(nil, v)); got != want {
				t.Fatalf("uvarintLen(%d) = %d, want %d", v, got, want)
			}
		}
	}
	if uvarintLen(0) != 1 || uvarintLen(^uint64(0)) != binary.MaxVarintLen64 {
		t.Fatalf("uvarintLen(0) = %d, uvarintLen(max) = %d", uvarintLen(0), uvarintLen(^uint64(0)))
	}
}

// TestUvarintMatchesBinary checks uvarint against encoding/binary on every
// length, at the end of a buffer and away from it, and on overlong and
// overflowing encodings.
func TestUvarintMatchesBinary(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for k := 0; k < 20000; k++ {
		var buf []byte
		switch k % 3 {
		case 0:
			buf = binary.AppendUvarint(nil, rng.Uint64()>>rng.IntN(64))
		case 1: // arbitrary bytes, often with continuation bits
			buf = make([]byte, 1+rng.IntN(12))
			for j := range buf {
				buf[j] = byte(rng.Uint32()) | byte(rng.IntN(2)<<7)
			}
		case 2: // ten continuation bytes and more
			buf = bytes.Repeat([]byte{0xff}, 9+rng.IntN(3))
			buf = append(buf, byte(rng.IntN(4)))
		}
		pad := rng.IntN(12)
		b := append(append([]byte{}, buf...), make([]byte, pad)...)
		want, n := binary.Uvarint(b)
		got, i := uvarint(b, 0)
		if n <= 0 {
			if i >= 0 {
				t.Fatalf("% x: uvarint = %d, %d; binary.Uvarint fails", b, got, i)
			}
			continue
		}
		if i != n || got != want {
			t.Fatalf("% x: uvarint = %d, %d; binary.Uvarint = %d, %d", b, got, i, want, n)
		}
	}
}

// TestUvarintShort checks uvarintShort against uvarint on four-byte
// words: random words, overlong encodings among them, the encodings of the
// values at every bit length up to 28, and words it must leave to
// uvarint (no end in four bytes, fewer than four bytes left).
func TestUvarintShort(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	check := func(b []byte) {
		v, n := uvarintShort(b, 0)
		if len(b) < 4 || binary.LittleEndian.Uint32(b)&0x80808080 == 0x80808080 {
			if n >= 0 {
				t.Fatalf("uvarintShort(% x) = %d, %d, want it left to uvarint", b, v, n)
			}
			return
		}
		want, wn := uvarint(append(b[:4:4], make([]byte, 8)...), 0)
		if v != want || n != wn {
			t.Fatalf("uvarintShort(% x) = %d, %d, want %d, %d", b, v, n, want, wn)
		}
	}
	for k := 0; k < 200000; k++ {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], rng.Uint32())
		check(b[:])
		check(b[:k%4])
	}
	for s := range 29 {
		for _, v := range []uint64{1 << s, 1<<s - 1, 1<<s + 1} {
			b := append(binary.AppendUvarint(nil, v&(1<<28-1)), 0xff, 0xff, 0xff)
			check(b)
		}
	}
	if v, n := uvarintShort([]byte{0x80, 0x80, 0x00, 0xff}, 0); v != 0 || n != 3 { // zero, overlong
		t.Fatalf("uvarintShort(80 80 00 ff) = %d, %d, want 0, 3", v, n)
	}
	if _, n := uvarintShort([]byte{0, 0, 0, 0}, -1); n >= 0 {
		t.Fatalf("uvarintShort at -1 = %d, want negative", n)
	}
}

// TestGcdStep checks the encoder's running gcd step against gcd: zero,
// one, powers of two and others, for values they divide and values they
// do not.
func TestGcdStep(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	gs := []uint64{0, 1, 2, 512, 1000, 3 << 20, 1 << 63, math.MaxUint64, 6, 1 << 40}
	for range 200 {
		gs = append(gs, r.Uint64N(1<<20), uint64(1)<<r.IntN(64), r.Uint64())
	}
	for _, g := range gs {
		xs := []uint64{0, 1, g, 2 * g, 3 * g, g + 1, g / 2, math.MaxUint64, r.Uint64(), r.Uint64N(1 << 16)}
		for _, x := range xs {
			if got, want := gcdStep(g, x), gcd(g, x); got != want {
				t.Fatalf("gcdStep(%d, %d) = %d, gcd %d", g, x, got, want)
			}
		}
	}
}
