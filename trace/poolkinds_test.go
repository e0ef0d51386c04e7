package trace

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// poolEvents is a stream of version 3's kinds among older ones: device
// memory samples, a graph captured on a side stream into its private pool,
// a MemPool routed by thread, and the graph's pool released.
func poolEvents() []Event {
	const total = 150_109_880_320
	graph, mem := PoolID(1, 0), PoolID(0, 2)
	return []Event{
		{Kind: KindDeviceMem, TimeNS: 1000, Device: 0, SizeBytes: total - 600<<20, Aux: total},
		{Kind: KindSegmentAlloc, TimeNS: 2000, Addr: 0x7f0000000000, SizeBytes: 20 << 20},
		{Kind: KindAlloc, TimeNS: 2000, Addr: 0x7f0000000000, SizeBytes: 12 << 20},
		{Kind: KindPoolBegin, TimeNS: 3000, Stream: 0x7f3c5a000400, Aux: graph},
		{Kind: KindAlloc, TimeNS: 3100, Stream: 0x7f3c5a000400, Addr: 0x7f0001400000, SizeBytes: 4 << 20},
		{Kind: KindPoolEnd, TimeNS: 3200, Stream: 0x7f3c5a000400, Aux: graph},
		{Kind: KindDeviceMem, TimeNS: 3300, Device: 1, SizeBytes: total - 700<<20, Aux: total},
		{Kind: KindPoolBegin, TimeNS: 4000, Aux: mem},
		{Kind: KindPoolEnd, TimeNS: 4100, Aux: mem},
		{Kind: KindPoolRelease, TimeNS: 5000, Aux: graph},
		{Kind: KindFreeRequested, TimeNS: 6000, Addr: 0x7f0000000000, SizeBytes: 12 << 20},
		{Kind: KindFreeCompleted, TimeNS: 6000, Addr: 0x7f0000000000, SizeBytes: 12 << 20},
	}
}

func writeEvents(t *testing.T, evs []Event, opts ...WriterOption) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteEvents(evs); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestPoolKindsRoundTrip(t *testing.T) {
	want := poolEvents()
	for _, chunk := range []int{1, 3, 1000} {
		data := writeEvents(t, want, ChunkEvents(chunk))
		if data[len(Magic)] != 3 {
			t.Fatalf("format version %d written, want 3", data[len(Magic)])
		}
		_, got, err := ReadAll(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("chunk %d: read\n%+v\nwant\n%+v", chunk, got, want)
		}
		// The text twin and back gives the same file.
		text := binaryToText(t, data)
		for _, line := range []string{
			"device_mem t=1000 dev=0 stream=0x0 size=149480734720 aux=150109880320",
			"pool_begin t=3000 dev=0 stream=0x7f3c5a000400 aux=1",
			"pool_end t=3200 dev=0 stream=0x7f3c5a000400 aux=1",
			"pool_begin t=4000 dev=0 stream=0x0 aux=9223372036854775810",
			"pool_release t=5000 dev=0 stream=0x0 aux=1",
		} {
			if !strings.Contains(text, line+"\n") {
				t.Errorf("text twin lacks %q:\n%s", line, text)
			}
		}
		if again := textToBinary(t, text, ChunkEvents(chunk)); !bytes.Equal(again, data) {
			t.Errorf("chunk %d: dump and undump give a different file", chunk)
		}
	}
}

func TestPoolKindNames(t *testing.T) {
	for k, name := range map[Kind]string{KindDeviceMem: "device_mem", KindPoolBegin: "pool_begin", KindPoolEnd: "pool_end", KindPoolRelease: "pool_release"} {
		if k.String() != name || !k.Valid() {
			t.Errorf("kind %d: String %q, Valid %v; want %q, true", k, k, k.Valid(), name)
		}
		if p, ok := ParseKind(name); !ok || p != k {
			t.Errorf("ParseKind(%q) = %v, %v", name, p, ok)
		}
	}
	// The values are part of the format.
	if KindDeviceMem != 13 || KindPoolBegin != 14 || KindPoolEnd != 15 || KindPoolRelease != 16 || NumKinds != 17 {
		t.Errorf("kind values moved: %d %d %d %d, NumKinds %d", KindDeviceMem, KindPoolBegin, KindPoolEnd, KindPoolRelease, NumKinds)
	}
	if Kind(NumKinds).Valid() {
		t.Errorf("kind %d valid", NumKinds)
	}
}

func TestPoolID(t *testing.T) {
	for _, c := range []struct{ a, b, want uint64 }{
		{1, 0, 1},
		{4, 0, 4},
		{0, 1, 1<<63 | 1},
		{0, 7, 1<<63 | 7},
		{3, 9, 3},
		{0, 0, 1 << 63},
	} {
		if got := PoolID(c.a, c.b); got != c.want {
			t.Errorf("PoolID(%d, %d) = %#x, want %#x", c.a, c.b, got, c.want)
		}
	}
}

func TestPoolKindsSummary(t *testing.T) {
	r, err := NewReader(bytes.NewReader(writeEvents(t, poolEvents())))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Summarize(r)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"device_mem": 2, "pool_begin": 2, "pool_end": 2, "pool_release": 1, "alloc": 2}
	for name, n := range want {
		if s.ByKind[name] != n {
			t.Errorf("by_kind[%s] = %d, want %d", name, s.ByKind[name], n)
		}
	}
	if len(s.ByKind) != NumKinds-1 {
		t.Errorf("by_kind has %d keys, want %d", len(s.ByKind), NumKinds-1)
	}
	if !reflect.DeepEqual(s.Devices, []DeviceID{0, 1}) {
		t.Errorf("devices %v", s.Devices)
	}
}

// TestPoolKindsNeedVersion3 checks that a file of an older version holding
// a new kind is refused as corrupt, naming the event: a version 2 reader
// knows no kind past snapshot. (A version 3 file is refused by a version 2
// reader as a newer version: see TestVersionAndMagic.)
func TestPoolKindsNeedVersion3(t *testing.T) {
	for _, v := range []int{1, 2} {
		evs := []Event{{Kind: KindAlloc, TimeNS: 1, Addr: 0x1000, SizeBytes: 512}, {Kind: KindPoolBegin, TimeNS: 2, Aux: 1}}
		var enc eventEncoder
		p := enc.encode(nil, evs, v)
		var buf bytes.Buffer
		w, err := NewWriter(&buf, &Header{Producer: ProducerSynthetic}, formatVersion(v))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.writeChunk(chunkEvents, p); err != nil {
			t.Fatal(err)
		}
		_, got, err := ReadAll(bytes.NewReader(buf.Bytes()))
		var fe *FormatError
		if !errors.As(err, &fe) || !errors.Is(err, ErrCorrupt) || fe.Event != 1 || !strings.Contains(err.Error(), "unknown event kind 14") {
			t.Errorf("version %d: err = %v, want unknown event kind 14 at event 1", v, err)
		}
		if len(got) != 1 {
			t.Errorf("version %d: %d events before the bad one, want 1", v, len(got))
		}
	}
}
