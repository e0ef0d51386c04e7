package trace

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
)

// TestStreamingMemory checks that neither side's buffers grow with the
// trace: the writer holds one chunk, and reading allocates nothing per
// event once its buffers have grown to the largest chunk.
func TestStreamingMemory(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, nil, ChunkEvents(4096))
	if err != nil {
		t.Fatal(err)
	}
	evs := transformerStream(rand.New(rand.NewPCG(4, 4)), w, 200_000)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if cap(w.events) > 4096 || cap(w.raw) > 4096*40 {
		t.Errorf("writer buffers grew to %d events and %d bytes, want at most one chunk's", cap(w.events), cap(w.raw))
	}
	r, err := NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	// Read the first chunks so that the buffers reach their size.
	for range 3 * 4096 {
		if _, err := r.ReadEvent(); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(100_000, func() {
		if _, err := r.ReadEvent(); err != nil && err != io.EOF {
			t.Fatal(err)
		}
	})
	if allocs > 0.001 {
		t.Errorf("%.4f allocations per event read", allocs)
	}
	n := 3*4096 + 100_001
	for {
		if _, err := r.ReadEvent(); err != nil {
			break
		}
		n++
	}
	if n != len(evs) || cap(r.raw) > 4096*40 {
		t.Errorf("read %d events of %d; raw buffer %d bytes", n, len(evs), cap(r.raw))
	}
}
