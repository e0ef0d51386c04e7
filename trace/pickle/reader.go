package pickle

import (
	"fmt"
	"io"
	"math"
)

// Decoding from an io.Reader (NewReaderDecoder).
//
// The decoder then holds a window of the input, not the whole of it: its
// data is the window, its positions are offsets in the window, and the
// window starts at byte base of the input. When DecodeDoc's position comes
// within windowLow bytes of the window's end, the bytes from the position
// on move to the window's start and the rest of the window is read from
// the reader (slide). Every path but the general one decodes only what
// the window holds and leaves the rest to the general path, which reads
// more (more) when an argument runs past the window's end: the window then
// grows to hold the argument, positions kept, and shrinks back at the next
// slide. Nothing decoded refers to the input's bytes (strings are copied
// into the Doc), so the window's bytes may move or be overwritten once
// decoded. The window's size, not the input's, bounds what the decoder
// buffers, but for an argument larger than the window (a string is kept
// whole in the Doc anyway).

// Window sizes of a decoder reading from an io.Reader: windowSize bytes,
// slid when fewer than windowLow are left past the position. (Variables
// for tests, which shrink them to put a window's end inside every
// opcode.)
var (
	windowSize = 1 << 20
	windowLow  = 64 << 10
)

// streamIn is the input of a decoder that reads from an io.Reader.
type streamIn struct {
	r    io.Reader
	base int64 // the input's offset of the window's first byte
	size int64 // the input's size when known (a hint), else -1
	win  int   // windowSize, and windowLow, when the decoder was made
	low  int
	eof  bool  // the reader has ended (err says why when not io.EOF)
	err  error // the reader's error
	peak int   // the most bytes the window has held at once
}

// NewReaderDecoder returns a decoder of the pickle read from r, holding a
// window of it rather than the whole (see the package's reader.go):
// DecodeDoc gives the same Doc, entries and errors at the same offsets as
// from the whole input in memory, and the budget counts the bytes decoded
// so far. size is the input's size when known (a decompressed stream's
// size from its header), else -1: it sizes the tables and is the total
// given to Progress, and a wrong one costs only memory or time. Workers is
// ignored: the workers decode ahead in an input held whole. After
// DecodeDoc, the reader has been read up to about the window's size past
// the pickle's STOP.
func NewReaderDecoder(r io.Reader, size int64) *Decoder {
	d := newDecoder(nil, int(min(max(size, 0), initialBytes)))
	d.in = &streamIn{r: r, size: size, win: windowSize, low: windowLow}
	d.budget = budgetFloor
	return d
}

// BufferedPeak returns the most bytes of input a decoder made by
// NewReaderDecoder has held at once (its window's largest capacity), or 0.
func (d *Decoder) BufferedPeak() int {
	if d.in == nil {
		return 0
	}
	return d.in.peak
}

// abs returns the input's offset of window offset off.
func (d *Decoder) abs(off int) int64 {
	if d.in == nil {
		return int64(off)
	}
	return d.in.base + int64(off)
}

// inputSize returns the input's size, or -1 while not known.
func (d *Decoder) inputSize() int64 {
	switch {
	case d.in == nil:
		return int64(len(d.data))
	case d.in.eof:
		return d.in.base + int64(len(d.data))
	}
	return d.in.size
}

// progressTotal returns the total given to Progress at offset pos: the
// input's size, or -1 when it is not known (a reader's size hint that pos
// has passed was wrong).
func (d *Decoder) progressTotal(pos int64) int64 {
	if n := d.inputSize(); n >= pos {
		return n
	}
	return -1
}

// memoCeil bounds the memo indexes a PUT stores in the memo's slice
// rather than its map: a real pickle stores at most one memo entry per
// input byte.
func (d *Decoder) memoCeil() uint64 {
	n := d.abs(len(d.data))
	if d.in != nil {
		n = max(n, d.in.size)
	}
	return uint64(n)
}

// readEnd returns what truncation errors add when the reader failed (it
// did not simply end).
func (d *Decoder) readEnd() string {
	if d.in == nil || d.in.err == nil {
		return ""
	}
	return fmt.Sprintf(" (reading the input failed: %v)", d.in.err)
}

// slide moves the window so that it starts at window offset pos, and
// fills the rest of it from the reader. It returns how far the positions
// moved (pos), or an error when the input passes MaxInputBytes.
func (d *Decoder) slide(pos int) (int, error) {
	in := d.in
	rest := len(d.data) - pos
	buf := d.data[:cap(d.data)]
	if cap(buf) < in.win || (cap(buf) > 2*in.win && rest <= in.win/2) {
		// The first window, or one that grew for a long argument.
		buf = make([]byte, max(in.win, rest))
	}
	copy(buf, d.data[pos:])
	d.data = buf[:rest]
	in.base += int64(pos)
	d.fill(len(buf))
	if end := in.base + int64(len(d.data)); end >= MaxInputBytes {
		return pos, &Error{Offset: end, Msg: fmt.Sprintf("pickle of more than %d bytes is larger than the %d bytes supported", end, MaxInputBytes), Err: ErrMalformed}
	}
	return pos, nil
}

// fill reads from the reader into the window until it holds want bytes
// (within its capacity), no more, or the reader ends.
func (d *Decoder) fill(want int) {
	in := d.in
	n := len(d.data)
	buf := d.data[:cap(d.data)]
	want = min(want, len(buf))
	idle := 0
	for n < want && !in.eof {
		k, err := in.r.Read(buf[n:want])
		n += k
		switch {
		case err == io.EOF:
			in.eof = true
		case err != nil:
			in.eof, in.err = true, err
		case k == 0:
			if idle++; idle >= 100 {
				in.eof, in.err = true, io.ErrNoProgress
			}
		default:
			idle = 0
		}
	}
	d.data = buf[:n]
	in.peak = max(in.peak, cap(buf))
}

// more makes the window hold at least want bytes from d.pos, growing it
// (positions kept) as the bytes arrive, so that no length read from the
// input allocates more than the input has; it reports whether it does.
func (d *Decoder) more(want uint64) bool {
	in := d.in
	if in == nil {
		return false
	}
	for uint64(len(d.data)-d.pos) < want && !in.eof {
		if len(d.data) == cap(d.data) {
			grown := make([]byte, len(d.data), 2*cap(d.data)+in.win)
			copy(grown, d.data)
			d.data = grown
		}
		need := uint64(d.pos) + want
		if need > math.MaxInt {
			need = math.MaxInt
		}
		d.fill(int(need))
	}
	return uint64(len(d.data)-d.pos) >= want
}
