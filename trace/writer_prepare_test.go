package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestPrepareWriterSameBytes checks that writers given prepared buffers
// and warmed encoders (sequential and concurrent, with the default chunk
// size and more than one chunk) write the same bytes as writers without,
// and that they take what was prepared.
func TestPrepareWriterSameBytes(t *testing.T) {
	// Three chunks of events, so that each of two workers compresses one
	// or more and takes its prepared encoder, even on one CPU (with two,
	// the first worker may compress both before the second runs). The
	// bytes without prepared writers are written once a level: the
	// sequential writer's, which a concurrent writer's are too
	// (TestConcurrencySameBytes).
	const n = 2*DefaultChunkEvents + 123
	var byLevel [2][]byte
	var evs []Event
	for c := range 4 {
		workers, opts := 1+c%2, []WriterOption{Concurrency(1 + c%2)}
		if c >= 2 {
			opts = append(opts, FastCompression())
		}
		if c%2 == 0 {
			byLevel[c/2], evs, _ = writeRandom(t, 11, n, opts...)
		}
		want := byLevel[c/2]
		PrepareWriter(workers, 0, opts...)
		got, _, _ := writeRandom(t, 11, n, opts...)
		prepared.mu.Lock()
		pending, bufs := prepared.pending, prepared.bufsPending
		prepared.mu.Unlock()
		if pending != [2]int{} || bufs {
			t.Errorf("case %d: %v prepared encoders and buffers (%v) left untaken", c, pending, bufs)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: %d bytes with prepared writer differ from the %d without", c, len(got), len(want))
		}
		if c%2 == 1 {
			continue // the bytes of case c-1, read back
		}
		if n, diff, err := readBack(got, evs); err != nil || diff != "" || n != len(evs) {
			t.Fatalf("case %d: read %d events, %v %s; want %d", c, n, err, diff, len(evs))
		}
	}
	if bytes.Equal(byLevel[0], byLevel[1]) {
		t.Fatalf("FastCompression wrote the default level's bytes")
	}
	// Buffers prepared for the default chunk size are not given to a
	// writer of larger chunks, which would outgrow them.
	PrepareWriter(0, 0)
	writeRandom(t, 12, 1000, ChunkEvents(2*DefaultChunkEvents))
	if b := takeBuffers(DefaultChunkEvents); b == nil || cap(b.events) != DefaultChunkEvents {
		t.Fatalf("prepared buffers taken by a writer of larger chunks")
	}
}

// TestEncoderWindowSameBytes checks that the writer's encoder window gives
// the bytes a window as large as the levels' defaults (8 MiB) gives, with
// the same blocks (see newEncoder), for chunks up to the window.
func TestEncoderWindowSameBytes(t *testing.T) {
	for lv := range encoderLevels {
		testEncoderWindow(t, lv)
	}
}

func testEncoderWindow(t *testing.T, lv int) {
	def, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false),
		zstd.WithWindowSize(8<<20), zstd.WithEncoderLevel(encoderLevels[lv]))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := newEncoder(lv)
	if err != nil {
		t.Fatal(err)
	}
	raw, _, _ := writeRandom(t, 13, 20000) // compressed chunks: little to match
	evs := make([]Event, 0, 40000)
	rng := rand.New(rand.NewPCG(13, 14))
	for range cap(evs) {
		evs = append(evs, Event{Kind: KindAlloc, TimeNS: int64(rng.IntN(1 << 20)), Addr: uint64(rng.IntN(64)) << 20, SizeBytes: 512 << rng.IntN(8)})
	}
	var ee eventEncoder
	cols := ee.encode(nil, evs, Version)
	var all []byte // chunk-like data, one window of it
	for len(all) < encoderWindow {
		all = append(append(all, cols...), raw[:min(len(raw), 64<<10)]...)
	}
	all = all[:encoderWindow]
	for _, n := range []int{100, 5000, 200 << 10, 1 << 20, encoderWindow} {
		src := all[:n]
		if want, got := def.EncodeAll(src, nil), enc.EncodeAll(src, nil); !bytes.Equal(got, want) {
			t.Fatalf("level %d, %d bytes: %d compressed bytes differ from an 8 MiB window's %d", lv, n, len(got), len(want))
		}
	}
}

// TestPrepareWriterSized checks that PrepareWriter sizes the buffers for
// the events expected, and that a writer given a closed writer's buffers
// and encoder (PrepareWriter takes them first) writes the same bytes.
func TestPrepareWriterSized(t *testing.T) {
	for idleBuffers.Get() != nil { // earlier tests' writers' (taken first)
	}
	PrepareWriter(0, 1000)
	b := takeBuffers(DefaultChunkEvents)
	if b == nil || cap(b.events) < 1000 || cap(b.events) > 2000 {
		t.Fatalf("buffers prepared for 1000 events hold %d", cap(b.events))
	}
	for _, n := range []int{1000, DefaultChunkEvents + 5} { // one chunk, and more
		want, _, _ := writeRandom(t, 15, n)
		writeRandom(t, 16, n+77) // closed: its buffers and encoder are idle
		PrepareWriter(1, n)
		if got, _, _ := writeRandom(t, 15, n); !bytes.Equal(got, want) {
			t.Fatalf("%d events: %d bytes with a closed writer's buffers differ from the %d without", n, len(got), len(want))
		}
	}
}

// TestEncoderOneBlock checks that both encoder levels compress an input of
// up to 128 KiB as a single zstd block (the path without history), and a
// larger one as several.
func TestEncoderOneBlock(t *testing.T) {
	src := make([]byte, 200<<10)
	x := uint64(1)
	for i := range src {
		x = x*6364136223846793005 + 1442695040888963407
		src[i] = byte(x>>59) + 'a' // compressible, not to nothing
	}
	for lv := range encoderLevels {
		e, err := newEncoder(lv)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1000, 64<<10 + 1, 100 << 10, 128 << 10, 128<<10 + 1} {
			frame := e.EncodeAll(src[:n], nil)
			blocks, err := zstdBlocks(frame)
			if err != nil {
				t.Fatalf("level %d, %d bytes: %v", lv, n, err)
			}
			if want1 := n <= 128<<10; (blocks == 1) != want1 {
				t.Errorf("level %d, %d bytes: %d blocks, want one: %v", lv, n, blocks, want1)
			}
		}
	}
}

// zstdBlocks counts the blocks of a single zstd frame.
func zstdBlocks(f []byte) (int, error) {
	if len(f) < 6 || binary.LittleEndian.Uint32(f) != 0xFD2FB528 {
		return 0, errors.New("not a zstd frame")
	}
	fhd := f[4]
	pos := 5
	if fhd&0x20 == 0 { // no single segment: a window byte
		pos++
	}
	pos += [4]int{0, 1, 2, 4}[fhd&3] // dictionary ID
	fcs := [4]int{0, 2, 4, 8}[fhd>>6]
	if fcs == 0 && fhd&0x20 != 0 {
		fcs = 1
	}
	pos += fcs
	for n := 1; ; n++ {
		if pos+3 > len(f) {
			return 0, errors.New("cut block header")
		}
		h := int(f[pos]) | int(f[pos+1])<<8 | int(f[pos+2])<<16
		size := h >> 3
		if (h>>1)&3 == 1 { // RLE: one byte
			size = 1
		}
		pos += 3 + size
		if h&1 == 1 {
			return n, nil
		}
	}
}
