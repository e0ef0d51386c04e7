package trace

import (
	"bytes"
	"errors"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// binaryToText returns the text twin of a binary trace.
func binaryToText(t *testing.T, data []byte) string {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteText(&out, r); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// textToBinary converts a text trace to a binary one.
func textToBinary(t *testing.T, text string, opts ...WriterOption) []byte {
	t.Helper()
	tr, err := NewTextReader(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	tr.Raw = true // the format's extremes
	var buf bytes.Buffer
	w, err := NewWriter(&buf, tr.Header(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.CopyTo(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTripText(t *testing.T) {
	for seed := range uint64(10) {
		data, want, _ := writeRandom(t, seed, 1500, ChunkEvents(200))
		text := binaryToText(t, data)
		data2 := textToBinary(t, text, ChunkEvents(333))
		_, got, err := ReadAll(bytes.NewReader(data2))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] {
					t.Fatalf("seed %d: event %d = %+v after text, want %+v", seed, i, got[i], want[i])
				}
			}
			t.Fatalf("seed %d: %d events after text, want %d", seed, len(got), len(want))
		}
		if text2 := binaryToText(t, data2); text2 != text {
			t.Fatalf("seed %d: text -> binary -> text differs", seed)
		}
	}
}

// goldenTrace writes a small trace with every kind, markers, stacks and
// a header with every field.
func goldenTrace(t *testing.T, opts ...WriterOption) []byte {
	t.Helper()
	h := &Header{
		Producer: ProducerSynthetic, ProducerVersion: "fragsim test", GPUName: "NVIDIA H100 80GB HBM3",
		GPUTotalBytes: 85_045_870_592, DriverVersion: "550.54.15", CUDAVersion: "12.4", TorchVersion: "2.5.1+cu124",
		Host: "node7", Created: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), CommandLine: []string{"python", "train.py"},
		AllocConf: "expandable_segments:False,max_split_size_mb:128", AllocSettings: map[string]string{"max_split_size": "134217728"},
		MemoryFraction: 0.9, Tags: map[string]string{"workload": "golden"}, Approximate: []string{"free_completed times"},
		Initial: &InitialState{Segments: []Segment{{Device: 0, Addr: 0x7f0000000000, SizeBytes: 2 << 20, Pool: "small",
			Blocks: []Block{{Addr: 0x7f0000000000, SizeBytes: 512, RequestedBytes: 100, State: BlockAllocated},
				{Addr: 0x7f0000000200, SizeBytes: 2<<20 - 512, State: BlockInactive}}}}},
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h, append([]WriterOption{ChunkEvents(8)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	fn, file := w.String("forward"), w.String("model.py")
	stk := w.Stack([]Frame{{Func: fn, File: file, Line: 42}, {Func: w.String("<module>"), File: w.String("train.py"), Line: 7}})
	step := w.String("step 1")
	const s = StreamID(0x7f3c5a000400)
	base := int64(1_764_504_000_000_000_000)
	evs := []Event{
		{Kind: KindMarker, Marker: MarkerModel, Text: w.String("llama-7b")},
		{Kind: KindMarker, Marker: MarkerStep, Text: step, TimeNS: base},
		{Kind: KindSegmentAlloc, Stream: s, TimeNS: base + 1000, Addr: 0x7f0000200000, SizeBytes: 20 << 20},
		{Kind: KindAlloc, Stream: s, TimeNS: base + 1000, Addr: 0x7f0000200000, SizeBytes: 12_582_912, Stack: stk},
		{Kind: KindAlloc, Stream: s, TimeNS: base + 3000, Addr: 0x7f0000e00000, SizeBytes: 1000},
		{Kind: KindFreeRequested, Stream: s, TimeNS: base + 9000, Addr: 0x7f0000200000, SizeBytes: 12_582_912},
		{Kind: KindFreeCompleted, Stream: s, TimeNS: base + 15000, Addr: 0x7f0000200000, SizeBytes: 12_582_912},
		{Kind: KindSegmentMap, Device: 1, TimeNS: base + 16000, Addr: 0x7e0000000000, SizeBytes: 2 << 20},
		{Kind: KindAlloc, Device: 1, TimeNS: base + 16000, Addr: 0x7e0000000000, SizeBytes: 2 << 20},
		{Kind: KindSegmentUnmap, Device: 1, TimeNS: base + 17000, Addr: 0x7e0000000000, SizeBytes: 2 << 20},
		{Kind: KindOOM, Stream: s, TimeNS: base + 20000, SizeBytes: 80 << 30, Aux: 1 << 30},
		{Kind: KindSegmentFree, Stream: s, TimeNS: base + 21000, Addr: 0x7f0000200000, SizeBytes: 20 << 20},
		{Kind: KindEmptyCache, TimeNS: base + 21000},
		{Kind: KindSetFraction, TimeNS: base + 22000, Aux: math.Float64bits(0.5)},
		{Kind: KindSnapshot, TimeNS: base + 23000, SizeBytes: 1024},
		{Kind: KindMarker, Marker: MarkerText, TimeNS: base + 24000, Text: w.String("free text with \"quotes\"\nand a newline")},
		{Kind: KindAlloc, Stream: s, TimeNS: base - 5_000_000_000, Addr: math.MaxUint64 &^ 511, SizeBytes: math.MaxUint64},
	}
	for _, e := range evs {
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestTextGolden(t *testing.T) {
	data := goldenTrace(t)
	text := binaryToText(t, data)
	golden := filepath.Join("testdata", "golden.txt")
	if *update {
		if err := os.WriteFile(golden, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if text != string(want) {
		t.Errorf("text twin differs from %s (run go test -update to accept):\n%s", golden, text)
	}
	// The golden text converts back to the same events.
	_, w, _ := ReadAll(bytes.NewReader(data))
	_, g, err := ReadAll(bytes.NewReader(textToBinary(t, string(want))))
	if err != nil || !slices.Equal(g, w) {
		t.Errorf("golden text -> binary: %d events, err %v; want %d events", len(g), err, len(w))
	}
}

func TestTextErrors(t *testing.T) {
	head := TextMagic + "\nheader {}\n"
	for _, tc := range []struct{ text, want string }{
		{"hello\n", "line 1: want \"# fragsim text v1\""},
		{TextMagic + "\nalloc t=1\n", "line 2: want the header line"},
		{TextMagic + "\nheader {\n", "line 2: header JSON"},
		{head + "alloc t=1\nallok t=2\n", "line 4: unknown event kind or line type \"allok\""},
		{head + "alloc t=x\n", "line 3: alloc: bad t value \"x\""},
		{head + "alloc size=1\n", "line 3: alloc: missing t="},
		{head + "alloc t=1 t=2\n", "line 3: alloc: field \"t\" given twice"},
		{head + "alloc t=1 color=red\n", "line 3: alloc: unknown field \"color\""},
		{head + "\n# comment\nmarker t=1 text=3\n", "line 5: string 3 used before its definition"},
		{head + "alloc t=1 stack=2\n", "line 3: stack 2 used before its definition"},
		{head + "string 1 \"a\"\nstring 1 \"b\"\n", "line 4: string 1 defined twice"},
		{head + "string 1 unquoted\n", "line 3: string 1: want a quoted string"},
		{head + "stack 1 1:2\n", "line 3: stack 1: frame \"1:2\" is not func:file:line"},
		{head + "alloc t=1 dev=99999999999\n", "line 3: alloc: bad dev value"},
	} {
		_, err := ReadText(strings.NewReader(tc.text), discardSink{})
		var te *TextError
		if !errors.As(err, &te) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ReadText(%q) = %v, want an error starting %q", tc.text, err, tc.want)
		}
	}
}

func TestTextRandomLines(t *testing.T) {
	// Garbage never panics; every error names a line.
	rng := rand.New(rand.NewPCG(5, 5))
	words := []string{"alloc", "t=1", "t=-9", "dev=2", "stream=0xff", "addr=0x10", "size=3", "aux=1",
		"fraction=0.25", "marker=step", "text=1", "stack=1", "string", "stack", "1", "\"x\"", "1:1:1", "=", "header", "{}"}
	for range 2000 {
		var b strings.Builder
		b.WriteString(TextMagic + "\nheader {}\nstring 1 \"f\"\nstack 1 1:1:3\n")
		for range rng.IntN(5) {
			for range rng.IntN(6) {
				b.WriteString(words[rng.IntN(len(words))])
				b.WriteByte(' ')
			}
			b.WriteByte('\n')
		}
		if _, err := ReadText(strings.NewReader(b.String()), discardSink{}); err != nil && !strings.HasPrefix(err.Error(), "line ") {
			t.Fatalf("error %q names no line", err)
		}
	}
}
