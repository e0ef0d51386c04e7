package trace

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func testHeader() *Header {
	return &Header{Producer: ProducerSynthetic, GPUName: "Test GPU", GPUTotalBytes: 80 << 30,
		AllocConf: "expandable_segments:True", Tags: map[string]string{"seed": "1"}}
}

// writeRandom returns a random trace file and its events and tables.
func writeRandom(t testing.TB, seed uint64, n int, opts ...WriterOption) ([]byte, []Event, *Writer) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	evs := randomTraceIn(rand.New(rand.NewPCG(seed, 1)), w, n, w.opts.version)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), evs, w
}

func TestRoundTripBinary(t *testing.T) {
	for seed := range uint64(20) {
		// Every format version this package reads, written by its writer.
		version := Version - int(seed)%Version
		opts := []WriterOption{ChunkEvents(1 + int(seed)*37), formatVersion(version)}
		data, want, w := writeRandom(t, seed, 2000, opts...)
		if data[len(Magic)] != byte(version) {
			t.Fatalf("seed %d: format version %d written, want %d", seed, data[len(Magic)], version)
		}
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r.Header(), testHeader()) {
			t.Errorf("header = %+v, want %+v", r.Header(), testHeader())
		}
		var got []Event
		for {
			e, err := r.ReadEvent()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("seed %d: event %d: %v", seed, len(got), err)
			}
			got = append(got, e)
		}
		if len(got) != len(want) {
			t.Fatalf("seed %d: read %d events, want %d", seed, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("seed %d: event %d = %+v, want %+v", seed, i, got[i], want[i])
			}
		}
		for s, id := range w.strings {
			if r.String(id) != s {
				t.Fatalf("string %d = %q, want %q", id, r.String(id), s)
			}
		}
	}
}

func TestTruncatedEveryOffset(t *testing.T) {
	data, want, _ := writeRandom(t, 7, 1000, ChunkEvents(150))
	// Chunk boundaries: re-read the chunk frames.
	bounds := chunkBounds(t, data)
	if len(bounds) < 6 {
		t.Fatalf("only %d chunks", len(bounds))
	}
	ends := wholeChunkEvents(t, data)
	// Cut everywhere from the end of the third-to-last events chunk: in the
	// last two events chunks, the tables before them and the end chunk.
	var evChunks []int
	for i, off := range bounds {
		if data[off]&^chunkStored == chunkEvents {
			evChunks = append(evChunks, i)
		}
	}
	from := bounds[evChunks[len(evChunks)-3]+1]
	for cut := from; cut < len(data); cut++ {
		_, got, err := ReadAll(bytes.NewReader(data[:cut]))
		if !errors.Is(err, ErrTruncated) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cut at %d: err = %v, want ErrTruncated", cut, err)
		}
		// Events of whole chunks only.
		whole := eventsBefore(ends, cut)
		if len(got) != whole || !slices.Equal(got, want[:whole]) {
			t.Fatalf("cut at %d: read %d events, want the %d of whole chunks", cut, len(got), whole)
		}
	}
}

// chunkBounds returns the byte offset of every chunk of a valid file.
func chunkBounds(t testing.TB, data []byte) []int {
	t.Helper()
	off := len(Magic) + 1
	var b []int
	for off < len(data) {
		b = append(b, off)
		i := off + 1
		_, i = uvarint(data, i)
		n, i := uvarint(data, i)
		off = i + 4 + int(n)
	}
	return b
}

// wholeChunkEvents returns, for each chunk end offset of a valid file, the
// number of events in the chunks up to there.
func wholeChunkEvents(t testing.TB, data []byte) map[int]int {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	ends := map[int]int{int(r.Offset()): 0}
	for {
		_, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ends[int(r.Offset())] = int(r.nEvents)
	}
	return ends
}

// eventsBefore counts the events of the whole chunks in data[:cut].
func eventsBefore(ends map[int]int, cut int) int {
	best, n := -1, 0
	for off, c := range ends {
		if off <= cut && off > best {
			best, n = off, c
		}
	}
	return n
}

func TestBitFlips(t *testing.T) {
	data, _, _ := writeRandom(t, 3, 300, ChunkEvents(100))
	rng := rand.New(rand.NewPCG(9, 9))
	for range 3000 {
		d := bytes.Clone(data)
		i := rng.IntN(len(d))
		d[i] ^= 1 << rng.IntN(8)
		_, _, err := ReadAll(bytes.NewReader(d))
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at byte %d: err = %v, want ErrCorrupt", i, err)
		}
	}
}
