package pickle

import (
	"bytes"
	"os"
	"testing"
)

func BenchmarkDecodeValues(b *testing.B) {
	data, err := os.ReadFile("testdata/values.p4.pickle")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeDoc decodes the pickle named by $FRAGSIM_BENCH_SNAPSHOT.
func BenchmarkDecodeDoc(b *testing.B) {
	_, data := benchSnapshot(b)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := NewDecoder(data).DecodeDoc(); err != nil {
			b.Fatal(err)
		}
	}
}

// countHandler is an EntryHandler that reads each entry's ints, as an
// importer would, and counts them.
type countHandler struct {
	doc *Doc
	sum int64
}

func (h *countHandler) NewEntry(n uint32, off int) {}

func (h *countHandler) SetEntry(n uint32, kv []Value) error {
	for i := 1; i < len(kv); i += 2 {
		x, _ := h.doc.Int(kv[i])
		h.sum += x
	}
	return nil
}

// BenchmarkStreamEntries decodes $FRAGSIM_BENCH_SNAPSHOT with its trace
// entries streamed, through fastEntry ("fast") or the general path only,
// or through fastEntry from an io.Reader ("reader", see NewReaderDecoder).
func BenchmarkStreamEntries(b *testing.B) {
	_, data := benchSnapshot(b)
	for _, mode := range []string{"fast", "general", "reader"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				d := NewDecoder(data)
				if mode == "reader" {
					d = NewReaderDecoder(bytes.NewReader(data), int64(len(data)))
				}
				d.noFast = mode == "general"
				d.StreamEntries("device_traces", &countHandler{doc: d.Doc()})
				if _, err := d.DecodeDoc(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchSnapshot returns the path and bytes of the snapshot named by
// $FRAGSIM_BENCH_SNAPSHOT, and skips the benchmark when it is not set.
func benchSnapshot(b *testing.B) (string, []byte) {
	path := os.Getenv("FRAGSIM_BENCH_SNAPSHOT")
	if path == "" {
		b.Skip("FRAGSIM_BENCH_SNAPSHOT not set")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return path, data
}
