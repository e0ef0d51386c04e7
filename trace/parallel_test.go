package trace

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// TestConcurrencySameBytes checks that a writer compressing chunks on
// other goroutines writes the same file, byte for byte, as one that does
// not, with many small chunks, table-only chunks and Flush calls.
func TestConcurrencySameBytes(t *testing.T) {
	for _, chunk := range []int{1, 7, 300, DefaultChunkEvents} {
		for _, workers := range []int{2, 3, 8} {
			want, evs, _ := writeRandom(t, 5, 5000, ChunkEvents(chunk), ChunkBytes(4096))
			got, _, _ := writeRandom(t, 5, 5000, ChunkEvents(chunk), ChunkBytes(4096), Concurrency(workers))
			if !bytes.Equal(got, want) {
				t.Fatalf("chunk %d, %d workers: %d bytes differ from the sequential %d", chunk, workers, len(got), len(want))
			}
			_, read, err := ReadAll(bytes.NewReader(got))
			if err != nil || len(read) != len(evs) {
				t.Fatalf("chunk %d, %d workers: read %d events, %v; want %d", chunk, workers, len(read), err, len(evs))
			}
		}
	}
	// Flush puts everything written so far into the io.Writer.
	var seq, par bytes.Buffer
	ws, _ := NewWriter(&seq, testHeader(), ChunkEvents(10))
	wp, _ := NewWriter(&par, testHeader(), ChunkEvents(10), Concurrency(4))
	rs, rp := rand.New(rand.NewPCG(9, 1)), rand.New(rand.NewPCG(9, 1))
	for i := range 5 {
		randomTrace(rs, ws, 100*i+3)
		randomTrace(rp, wp, 100*i+3)
		if err := ws.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := wp.Flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(par.Bytes(), seq.Bytes()) {
			t.Fatalf("after Flush %d: %d bytes written, want %d", i, par.Len(), seq.Len())
		}
	}
	if err := wp.Close(); err != nil {
		t.Fatal(err)
	}
}

type failingWriter struct{ n, limit int }

var errDiskFull = errors.New("disk full")

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n+len(p) > f.limit {
		return 0, errDiskFull
	}
	f.n += len(p)
	return len(p), nil
}

// TestConcurrencyWriteError checks that a write error of a chunk
// compressed on another goroutine is returned, by Close at the latest.
func TestConcurrencyWriteError(t *testing.T) {
	w, err := NewWriter(&failingWriter{limit: 2000}, testHeader(), ChunkEvents(50), Concurrency(2))
	if err != nil {
		t.Fatal(err)
	}
	// The error comes back from WriteEvent (a later chunk) or Flush.
	var werr error
	for i := 0; i < 100000 && werr == nil; i++ {
		werr = w.WriteEvent(Event{Kind: KindAlloc, TimeNS: int64(i) * 977, Addr: uint64(i) * 0x9e3779b97f4a7c15, SizeBytes: 512})
		if werr == nil && i%1000 == 999 {
			werr = w.Flush()
		}
	}
	if !errors.Is(werr, errDiskFull) {
		t.Fatalf("Flush returned %v, want %v", werr, errDiskFull)
	}
	if err := w.Close(); !errors.Is(err, errDiskFull) {
		t.Fatalf("Close returned %v, want %v", err, errDiskFull)
	}
}
