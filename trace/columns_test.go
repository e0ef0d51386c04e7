package trace

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// zstdFrames returns the number of zstd frames in p, splitting it with a
// decoder frame by frame.
func zstdFrames(t *testing.T, p []byte) int {
	t.Helper()
	n := 0
	for len(p) > 0 {
		var h zstd.Header
		if err := h.Decode(p); err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		// Walk the frame's blocks: 3-byte headers, last-block bit 0.
		i := h.HeaderSize
		for {
			bh := uint32(p[i]) | uint32(p[i+1])<<8 | uint32(p[i+2])<<16
			size := int(bh >> 3)
			if (bh>>1)&3 == 1 { // RLE block: one byte
				size = 1
			}
			i += 3 + size
			if bh&1 == 1 {
				break
			}
		}
		if h.HasCheckSum {
			i += 4
		}
		p = p[i:]
		n++
	}
	return n
}

// nonEmptyColumns returns the number of non-empty data columns of an
// events payload of the current version.
func nonEmptyColumns(t *testing.T, p []byte) int {
	_, lens := payloadColumns(t, p, Version)
	n := 0
	for _, l := range lens {
		n += b2i(l > 0)
	}
	return n
}

func nonEmptyColumns1(t *testing.T, p []byte) int {
	_, lens := payloadColumns(t, p, 1)
	n := 0
	for _, l := range lens {
		n += b2i(l > 0)
	}
	return n
}

// TestColumnFrames checks that an events chunk is compressed as one zstd
// frame per non-empty column, that the frames decode to the payload, and
// that a payload that is not an events payload is one frame.
func TestColumnFrames(t *testing.T) {
	evs := transformerStream(rand.New(rand.NewPCG(5, 6)), discardSink{}, 5000)
	for i := range evs {
		evs[i].Stream = DefaultStream // nothing in the misc column
	}
	var ee eventEncoder
	raw := ee.encode(nil, evs, Version)
	enc, err := newEncoder(0)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	// A frame for the header and kinds, and one per non-empty column.
	comp := compressColumns(nil, enc, raw, Version)
	if got, want := zstdFrames(t, comp), 1+nonEmptyColumns(t, raw); got != want || want < 4 {
		t.Errorf("%d frames, want %d (at least 4)", got, want)
	}
	back, err := dec.DecodeAll(comp, nil)
	if err != nil || !bytes.Equal(back, raw) {
		t.Fatalf("frames decode to %d bytes (%v), want the %d of the payload", len(back), err, len(raw))
	}
	if one := enc.EncodeAll(raw, nil); len(comp) >= len(one) {
		t.Errorf("column frames take %d bytes, one frame %d", len(comp), len(one))
	}
	// A marker adds to the misc column.
	before := nonEmptyColumns(t, raw)
	evs = append(evs, Event{Kind: KindMarker, TimeNS: evs[len(evs)-1].TimeNS, Marker: MarkerStep, Text: 1})
	raw = ee.encode(nil, evs, Version)
	if got, want := zstdFrames(t, compressColumns(nil, enc, raw, Version)), 1+nonEmptyColumns(t, raw); got != want || nonEmptyColumns(t, raw) < before {
		t.Errorf("with a marker: %d frames, want %d", got, want)
	}
	// Version 1, without the ring column.
	raw1 := ee.encode(nil, evs, 1)
	if got, want := zstdFrames(t, compressColumns(nil, enc, raw1, 1)), 1+nonEmptyColumns1(t, raw1); got != want {
		t.Errorf("version 1: %d frames, want %d", got, want)
	}
	// Not an events payload (a bad varint, lengths beyond it): one frame.
	for _, bad := range [][]byte{bytes.Repeat([]byte{0xff}, 100), binary.AppendUvarint([]byte{1, 1, 1, 1, 0, 0, 0}, 1<<20)} {
		c := compressColumns(nil, enc, bad, Version)
		if got := zstdFrames(t, c); got != 1 {
			t.Errorf("%x: %d frames, want 1", bad[:8], got)
		}
		if back, err := dec.DecodeAll(c, nil); err != nil || !bytes.Equal(back, bad) {
			t.Errorf("%x: decodes to %x, %v", bad[:8], back, err)
		}
	}
}
