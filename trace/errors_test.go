package trace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// craftedFile writes a header, then the given raw chunks, framed and
// checksummed like the writer's, then an end chunk when end is set.
func craftedFile(t *testing.T, chunks [][2]any) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, &Header{Producer: ProducerSynthetic})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if err := w.writeChunk(c[0].(byte), c[1].([]byte)); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// eventsPayload encodes evs as an events chunk payload and returns it with
// the offset of its type bytes.
func eventsPayload(evs []Event) ([]byte, int) {
	var enc eventEncoder
	p := enc.encode(nil, evs, Version)
	i := 0
	for range headerLen(Version) {
		_, i = uvarint(p, i)
	}
	return p, i
}

func TestCorruptEventNamesIt(t *testing.T) {
	evs := []Event{
		{Kind: KindAlloc, TimeNS: 1000, Addr: 0x1000, SizeBytes: 512},
		{Kind: KindAlloc, TimeNS: 2000, Addr: 0x2000, SizeBytes: 512},
		{Kind: KindAlloc, TimeNS: 3000, Addr: 0x3000, SizeBytes: 512},
	}
	good, _ := eventsPayload(evs)
	bad, k := eventsPayload(evs)
	bad[k+2] = 31 // the third event of the second chunk: an unknown kind
	data := craftedFile(t, [][2]any{{byte(chunkEvents), good}, {byte(chunkEvents), bad}})
	path := filepath.Join(t.TempDir(), "bad.fst")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int
	for {
		_, err = f.ReadEvent()
		if err != nil {
			break
		}
		n++
	}
	if n != 5 {
		t.Errorf("read %d events before the corrupt one, want 5", n)
	}
	var fe *FormatError
	if !errors.As(err, &fe) || !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTruncated) {
		t.Fatalf("err = %v, want a FormatError matching ErrCorrupt only", err)
	}
	bounds := chunkBounds(t, data)
	if fe.File != path || fe.Chunk != 2 || fe.Event != 5 || fe.Offset != int64(bounds[2]) {
		t.Errorf("error = %+v, want file %s, chunk 2 at offset %d, event 5", fe, path, bounds[2])
	}
	want := fmt.Sprintf("%s: corrupt trace at byte offset %d (chunk 2, event 5): unknown event kind 31", path, bounds[2])
	if err.Error() != want {
		t.Errorf("message %q\nwant      %q", err, want)
	}
	if _, err2 := f.ReadEvent(); err2 != err {
		t.Errorf("second ReadEvent = %v, want the same error", err2)
	}
}

func TestTruncationMessage(t *testing.T) {
	data, _, _ := writeRandom(t, 1, 1000, ChunkEvents(100))
	bounds := chunkBounds(t, data)
	last := bounds[len(bounds)-2] // the last events chunk, before the end chunk
	cut := last + 10
	r, err := NewReader(bytes.NewReader(data[:cut]))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for {
		if _, err = r.ReadEvent(); err != nil {
			break
		}
		n++
	}
	want := fmt.Sprintf("truncated at byte offset %d (chunk %d, after event %d): 10 bytes of a partial chunk lost", last, len(bounds)-2, n)
	if !errors.Is(err, ErrTruncated) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %v\nwant prefix %q", err, want)
	}
	if n != 900 {
		t.Errorf("read %d events, want 900", n)
	}
	// Cut exactly at a chunk boundary: the missing end chunk tells.
	_, evs, err := ReadAll(bytes.NewReader(data[:bounds[len(bounds)-1]]))
	if len(evs) != 1000 || !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "without its end chunk") {
		t.Errorf("cut before the end chunk: %d events, err %v", len(evs), err)
	}
}

func TestVersionAndMagic(t *testing.T) {
	data, _, _ := writeRandom(t, 1, 10)
	newer := bytes.Clone(data)
	newer[len(Magic)] = Version + 1
	_, err := NewReader(bytes.NewReader(newer))
	if !errors.Is(err, ErrVersion) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("format version %d, this reader reads versions 1 to %d", Version+1, Version)) {
		t.Errorf("newer version: %v", err)
	}
	for _, in := range []string{"", "PK\x03\x04 a zip file", "FRAG"} {
		_, err := NewReader(strings.NewReader(in))
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("NewReader(%q) = %v, want ErrCorrupt", in, err)
		}
	}
}

func TestHeaderIgnoresUnknownKeys(t *testing.T) {
	// A header written by a later version, with keys this one lacks.
	var buf bytes.Buffer
	w, err := NewWriter(&buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf.Truncate(len(Magic) + 1)
	w.nChunks = 0
	w.writeChunk(chunkHeader, []byte(`{"producer":"live","gpu_name":"X","future_key":{"a":[1,2]},"tags":{"k":"v"}}`))
	w.WriteEvent(Event{Kind: KindEmptyCache, TimeNS: 5})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	h, evs, err := ReadAll(&buf)
	if err != nil || h.Producer != ProducerLive || h.GPUName != "X" || h.Tags["k"] != "v" || len(evs) != 1 {
		t.Errorf("header %+v, %d events, err %v", h, len(evs), err)
	}
}

func TestWriterChunking(t *testing.T) {
	for _, tc := range []struct {
		opt       WriterOption
		n, chunks int
	}{
		{ChunkEvents(100), 1000, 10},
		{ChunkEvents(1), 7, 7},
		{ChunkBytes(1 << 10), 2000, 0},
	} {
		var buf bytes.Buffer
		w, _ := NewWriter(&buf, nil, tc.opt)
		for i := range tc.n {
			w.WriteEvent(Event{Kind: KindAlloc, TimeNS: int64(i) * 7777, Addr: uint64(i) * 512 << 20, SizeBytes: uint64(i) * 1000})
		}
		w.Close()
		data := buf.Bytes()
		var sizes []int
		bounds := chunkBounds(t, data)
		for i, off := range bounds {
			if data[off]&^chunkStored == chunkEvents {
				end := len(data)
				if i+1 < len(bounds) {
					end = bounds[i+1]
				}
				sizes = append(sizes, end-off)
			}
		}
		if tc.chunks > 0 && len(sizes) != tc.chunks {
			t.Errorf("%d events: %d event chunks, want %d", tc.n, len(sizes), tc.chunks)
		}
		if tc.chunks == 0 && len(sizes) < 2 {
			t.Errorf("ChunkBytes(1KiB): %d event chunks for %d events", len(sizes), tc.n)
		}
		_, evs, err := ReadAll(bytes.NewReader(data))
		if err != nil || len(evs) != tc.n {
			t.Errorf("read %d events (%v), want %d", len(evs), err, tc.n)
		}
	}
}

func TestWriterRejects(t *testing.T) {
	w, _ := NewWriter(io.Discard, nil)
	if err := w.WriteEvent(Event{Kind: KindInvalid}); err == nil {
		t.Error("invalid kind accepted")
	}
	if err := w.WriteEvent(Event{Kind: KindMarker, Text: 5}); err == nil {
		t.Error("undefined string accepted")
	}
	if err := w.WriteEvent(Event{Kind: KindAlloc, Stack: 1}); err == nil {
		t.Error("undefined stack accepted")
	}
	w.Close()
	if err := w.WriteEvent(Event{Kind: KindAlloc}); err == nil {
		t.Error("event after Close accepted")
	}
}

func TestChunkBytesBound(t *testing.T) {
	// Extreme events: the flush threshold must bound the real chunk size.
	const limit = 1 << 14
	data, _, _ := writeRandom(t, 5, 5000, ChunkEvents(1<<20), ChunkBytes(limit))
	for _, off := range chunkBounds(t, data) {
		if data[off]&^chunkStored != chunkEvents {
			continue
		}
		raw, _ := uvarint(data, off+1)
		if raw > limit+100 {
			t.Errorf("events chunk at %d holds %d bytes, over the %d-byte threshold", off, raw, limit)
		}
	}
}
