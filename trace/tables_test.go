package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestTableBudget checks that a small file whose table chunks define
// strings of many times its size is refused, naming the file, offset and
// chunk, before they take much memory.
func TestTableBudget(t *testing.T) {
	// Three table chunks of 60 MiB strings: the second takes the strings
	// past the budget, and the third, which holds as much, is never read.
	// More chunks would only make the file bigger to build (each 60 MiB
	// of payload costs seconds under the race detector); the reader stops
	// at the first refusal. One payload is built, and framed three times:
	// the second time with its IDs moved past the first's, the third time
	// as the second (a reader that went on would refuse its IDs too, but
	// not with the budget's error).
	big := strings.Repeat("a", maxStringLen)
	p := make([]byte, 0, 60*(len(big)+2*binary.MaxVarintLen64+1))
	var idAt []int // the offset of each record's ID: one byte (IDs below 128)
	for id := range StringID(60) {
		idAt = append(idAt, len(p)+1)
		p = appendStringRecord(p, id+1, big)
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, &Header{Producer: ProducerSynthetic})
	if err != nil {
		t.Fatal(err)
	}
	for c := range 3 {
		if c == 1 {
			for _, i := range idAt {
				p[i] += 60
			}
		}
		if err := w.writeChunk(chunkTable, p); err != nil { // written before it returns: no Concurrency
			t.Fatal(err)
		}
	}
	data := buf.Bytes()
	if len(data) > 1<<20 {
		t.Fatalf("crafted file of %d bytes, want a small one", len(data))
	}
	path := filepath.Join(t.TempDir(), "bomb.fst")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadEvent()
	f.Close()
	runtime.ReadMemStats(&after)
	var fe *FormatError
	if !errors.As(err, &fe) || !errors.Is(err, ErrCorrupt) || fe.Chunk != 2 || fe.File != path ||
		!strings.Contains(err.Error(), "more than a file of this size can hold") {
		t.Fatalf("err = %v, want the table budget's error in chunk 2", err)
	}
	// One chunk's payload (60 MiB), its strings up to the budget, and
	// the compressed chunks: the three chunks' strings would be 180 MiB,
	// and their payloads as much again.
	limit := uint64(maxChunkRaw + tableFloor + tableRatio*int64(len(data)) + 32<<20)
	if got := after.TotalAlloc - before.TotalAlloc; got > limit {
		t.Errorf("reading a %d-byte file allocated %d bytes, more than %d", len(data), got, limit)
	}
	// Within the budget, a file with the same strings reads: the file up
	// to the second table chunk (a chunk's bytes do not depend on the
	// chunks after it).
	data = data[:chunkBounds(t, data)[2]]
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadEvent(); err == nil || !errors.Is(err, ErrTruncated) {
		t.Fatalf("one chunk of strings: err = %v, want only the missing end chunk", err)
	}
	if r.NumStrings() != 61 {
		t.Errorf("%d strings read, want 61", r.NumStrings())
	}
}

// TestDirectoryInput checks that a directory is reported as one, not as
// an empty file.
func TestDirectoryInput(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir)
	if err == nil || strings.Contains(err.Error(), "empty file") || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("Open(directory): err = %v, want it to say it is a directory", err)
	}
}
