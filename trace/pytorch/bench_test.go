package pytorch

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// BenchmarkImport imports the snapshot named by $FRAGSIM_BENCH_SNAPSHOT
// (bench/import/gen_snapshot.py writes one) into a trace in memory.
func BenchmarkImport(b *testing.B) {
	path := os.Getenv("FRAGSIM_BENCH_SNAPSHOT")
	if path == "" {
		b.Skip("FRAGSIM_BENCH_SNAPSHOT not set")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		s, err := Load(bytes.NewReader(data), path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		w, err := trace.NewWriter(io.Discard, s.Header())
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Emit(w, nil); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
