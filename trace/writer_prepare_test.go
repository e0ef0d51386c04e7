package trace

import (
	"bytes"
	"testing"
)

// TestPrepareWriterSameBytes checks that writers given prepared buffers
// and warmed encoders (sequential and concurrent, with the default chunk
// size and more than one chunk) write the same bytes as writers without,
// and that they take what was prepared.
func TestPrepareWriterSameBytes(t *testing.T) {
	const n = 3*DefaultChunkEvents + 123
	for _, workers := range []int{1, 2} {
		want, evs, _ := writeRandom(t, 11, n, Concurrency(workers))
		PrepareWriter(workers)
		got, _, _ := writeRandom(t, 11, n, Concurrency(workers))
		prepared.mu.Lock()
		pending, bufs := prepared.pending, prepared.bufsPending
		prepared.mu.Unlock()
		if pending != 0 || bufs {
			t.Errorf("%d workers: %d prepared encoders and buffers (%v) left untaken", workers, pending, bufs)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d workers: %d bytes with prepared writer differ from the %d without", workers, len(got), len(want))
		}
		_, read, err := ReadAll(bytes.NewReader(got))
		if err != nil || len(read) != len(evs) {
			t.Fatalf("%d workers: read %d events, %v; want %d", workers, len(read), err, len(evs))
		}
	}
	// Buffers prepared for the default chunk size are not given to a
	// writer of larger chunks, which would outgrow them.
	PrepareWriter(0)
	writeRandom(t, 12, 1000, ChunkEvents(2*DefaultChunkEvents))
	if b := takeBuffers(DefaultChunkEvents); b == nil || cap(b.events) != DefaultChunkEvents {
		t.Fatalf("prepared buffers taken by a writer of larger chunks")
	}
}
