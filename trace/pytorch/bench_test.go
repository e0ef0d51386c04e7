package pytorch

import (
	"bytes"
	"io"
	"os"
	"runtime"
	"testing"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pytorch/snapgen"
)

// BenchmarkImport imports the snapshot named by $FRAGSIM_BENCH_SNAPSHOT
// (bench/import/gen_snapshot.py writes one) into a trace in memory.
func BenchmarkImport(b *testing.B) {
	path, data := benchSnapshot(b)
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

// BenchmarkLoad decodes and converts $FRAGSIM_BENCH_SNAPSHOT without writing.
func BenchmarkLoad(b *testing.B) {
	_, data := benchSnapshot(b)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := LoadPickle(data, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEmit writes the converted $FRAGSIM_BENCH_SNAPSHOT to a trace.
func BenchmarkEmit(b *testing.B) {
	_, data := benchSnapshot(b)
	s, err := LoadPickle(data, Options{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
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

// BenchmarkEmitConcurrent is BenchmarkEmit with the writer compressing
// chunks on GOMAXPROCS goroutines.
func BenchmarkEmitConcurrent(b *testing.B) {
	_, data := benchSnapshot(b)
	s, err := LoadPickle(data, Options{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		w, err := trace.NewWriter(io.Discard, s.Header(), trace.Concurrency(runtime.GOMAXPROCS(0)))
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

// BenchmarkImportFile runs ImportFile on $FRAGSIM_BENCH_SNAPSHOT, as
// `fragsim import` does (the input mapped, the trace written to a file),
// without the process start: the figure to hold against Python's
// pickle.loads of the same bytes in a running interpreter.
func BenchmarkImportFile(b *testing.B) {
	path, data := benchSnapshot(b)
	out := b.TempDir() + "/out.fst"
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := ImportFile(path, out, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkImportStacks runs ImportFile on a snapshot of 100,000 entries
// with 8-frame Python stacks, shaped as PyTorch writes them (snapgen, as
// `genpickle -n 100000 -frames 8`), on every core and on one: entries
// with call stacks decoded on the workers, frames lists and all, and by
// the decoder alone.
func BenchmarkImportStacks(b *testing.B) {
	path := b.TempDir() + "/stacks.pickle"
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := snapgen.Write(f, 100_000, 1, 8); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	out := b.TempDir() + "/out.fst"
	for _, workers := range []int{0, 1} {
		name := "workers=cores"
		if workers == 1 {
			name = "workers=1"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(st.Size())
			for b.Loop() {
				if _, err := ImportFile(path, out, Options{Workers: workers}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*100_000/b.Elapsed().Seconds(), "entries/s")
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
