package trace

import (
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
	// payload costs seconds under the race detector); the reader stops at
	// the first refusal.
	big := strings.Repeat("a", maxStringLen)
	var chunks [][2]any
	id := StringID(1)
	for range 3 {
		p := make([]byte, 0, 60*(len(big)+2*binary.MaxVarintLen64+1))
		for range 60 {
			p = appendStringRecord(p, id, big)
			id++
		}
		chunks = append(chunks, [2]any{byte(chunkTable), p})
	}
	data := craftedFile(t, chunks)
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
	// Within the budget, a file with the same strings reads.
	data = craftedFile(t, chunks[:1])
	r, err := NewReader(strings.NewReader(string(data)))
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
