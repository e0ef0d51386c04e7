package trace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"
)

// longTests reports whether the long sweeps run (FRAGSIM_LONG=1, without
// the race detector): every place and writer of the sweeps that the
// everyday pass (go test -race) samples.
func longTests() bool { return os.Getenv("FRAGSIM_LONG") == "1" }

func testHeader() *Header {
	return &Header{Producer: ProducerSynthetic, GPUName: "Test GPU", GPUTotalBytes: 80 << 30,
		AllocConf: "expandable_segments:True", Tags: map[string]string{"seed": "1"}}
}

// writeRandom returns a random trace file and its events and tables.
func writeRandom(t testing.TB, seed uint64, n int, opts ...WriterOption) ([]byte, []Event, *Writer) {
	t.Helper()
	buf := &appendWriter{b: make([]byte, 0, 32*n+4096)} // more than its file (about 14 bytes an event)
	w, err := NewWriter(buf, testHeader(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	evs := randomTraceIn(rand.New(rand.NewPCG(seed, 1)), w, n, w.opts.version)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.b, evs, w
}

// appendWriter appends what is written to b. Given b's capacity up front,
// it copies each byte once, where a growing bytes.Buffer copies them
// again at each growth and bytes.Buffer.Grow zeroes what it reserves:
// under the race detector, each byte copied or zeroed costs.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// readBack reads the trace in data and compares its events, one at a
// time, with want, without holding them (tests read traces of hundreds of
// thousands of events, which the race detector makes slow to hold). It
// returns the number of events read, the first difference from want
// ("" if none; want nil only counts them), and the reader's error (nil at
// a clean end).
func readBack(data []byte, want []Event) (int, string, error) {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return 0, "", err
	}
	defer r.Close()
	for n := 0; ; n++ {
		e, err := r.ReadEvent()
		if err == io.EOF {
			return n, "", nil
		}
		if err != nil {
			return n, "", err
		}
		if want == nil {
			continue
		}
		if n >= len(want) {
			return n + 1, fmt.Sprintf("event %d past the %d expected", n, len(want)), nil
		}
		if e != want[n] {
			return n + 1, fmt.Sprintf("event %d = %+v, want %+v", n, e, want[n]), nil
		}
	}
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
	// The everyday pass cuts in every chunk's frame (its type, lengths and
	// checksum: the first 16 bytes) and at the bytes either side of each
	// boundary, and every 7th byte of the payloads between; the long pass
	// everywhere.
	near := map[int]bool{len(data) - 1: true}
	for _, b := range bounds {
		for d := -2; d < 16; d++ {
			near[b+d] = true
		}
	}
	for cut := from; cut < len(data); cut++ {
		if !longTests() && !near[cut] && (cut-from)%7 != 0 {
			continue
		}
		// Events of whole chunks only.
		whole := eventsBefore(ends, cut)
		n, diff, err := readBack(data[:cut], want[:whole])
		if !errors.Is(err, ErrTruncated) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cut at %d: err = %v, want ErrTruncated", cut, err)
		}
		if n != whole || diff != "" {
			t.Fatalf("cut at %d: read %d events (%s), want the %d of whole chunks", cut, n, diff, whole)
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
