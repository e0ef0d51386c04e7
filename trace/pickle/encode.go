package pickle

import (
	"bufio"
	"encoding/binary"
	"io"
	"math"
)

// Encoder writes a data-only pickle (protocol 4) as a stream of values:
// ints, strings, floats, bools, None, dicts, lists and pairs of ints, with
// the opcodes Python's own pickler uses for them, so that Python's pickle
// and the decoders that read PyTorch snapshots load it. Containers are
// opened, filled with values (a dict with key, value, key, value, ...) and
// closed; as Python does, their items are added batchSize at a time (a
// reader that spreads a batch into a call's arguments would overflow on a
// million), and nothing is memoized. The first write error is kept and
// returned by Close.
type Encoder struct {
	w        *bufio.Writer
	err      error
	buf      [10]byte
	open     []container // the containers being filled, innermost last
	fragment bool        // no STOP at Close (see NewFragment)
}

// container counts the values written into an open list or dict since
// its last batch.
type container struct {
	dict bool
	n    int
}

// batchSize is the number of items added to a container at once, as
// Python's pickler does.
const batchSize = 1000

// value notes a value written into the innermost container, closing the
// batch when it is full (after a dict's value, never between key and value).
func (e *Encoder) value() {
	if len(e.open) == 0 {
		return
	}
	c := &e.open[len(e.open)-1]
	c.n++
	switch {
	case c.dict && c.n == 2*batchSize:
		e.raw(opSETITEMS, opMARK)
		c.n = 0
	case !c.dict && c.n == batchSize:
		e.raw(opAPPENDS, opMARK)
		c.n = 0
	}
}

// NewEncoder starts a pickle on w.
func NewEncoder(w io.Writer) *Encoder {
	e := &Encoder{w: bufio.NewWriterSize(w, 1<<16)}
	e.raw(opPROTO, 4)
	return e
}

// NewFragment starts a fragment on w: values written as an Encoder writes
// them, without the pickle's start and end, for Embed to put into a
// pickle later as they are (a list built on disk while another is being
// written, say). Close flushes it.
func NewFragment(w io.Writer) *Encoder {
	return &Encoder{w: bufio.NewWriterSize(w, 1<<16), fragment: true}
}

// Embed writes the bytes of a fragment (see NewFragment) holding exactly
// one value as the next value of e's innermost container.
func (e *Encoder) Embed(r io.Reader) error {
	if e.err == nil {
		_, e.err = io.Copy(e.w, r)
	}
	e.value()
	return e.err
}

// Pickle opcodes the Encoder writes.
const (
	opPROTO            = 0x80
	opSTOP             = '.'
	opMARK             = '('
	opEMPTY_DICT       = '}'
	opEMPTY_LIST       = ']'
	opSETITEMS         = 'u'
	opAPPENDS          = 'e'
	opBININT           = 'J'
	opBININT1          = 'K'
	opBININT2          = 'M'
	opLONG1            = 0x8a
	opBINUNICODE       = 'X'
	opSHORT_BINUNICODE = 0x8c
	opBINFLOAT         = 'G'
	opNEWTRUE          = 0x88
	opNEWFALSE         = 0x89
	opNONE             = 'N'
	opTUPLE2           = 0x86
)

func (e *Encoder) raw(b ...byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

// Int writes an int.
func (e *Encoder) Int(v int64) {
	switch {
	case v >= 0 && v < 1<<8:
		e.raw(opBININT1, byte(v))
	case v >= 0 && v < 1<<16:
		e.raw(opBININT2, byte(v), byte(v>>8))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		binary.LittleEndian.PutUint32(e.buf[:4], uint32(int32(v)))
		e.raw(opBININT, e.buf[0], e.buf[1], e.buf[2], e.buf[3])
	default:
		e.long(uint64(v), v < 0)
	}
	e.value()
}

// Uint writes an int that may not fit an int64.
func (e *Encoder) Uint(v uint64) {
	if v <= math.MaxInt64 {
		e.Int(int64(v))
		return
	}
	e.long(v, false)
	e.value()
}

// long writes LONG1: the shortest little-endian two's complement of v.
func (e *Encoder) long(v uint64, neg bool) {
	n := 8
	if !neg {
		// Drop high zero bytes while the top bit of the next stays clear.
		for n > 1 && byte(v>>(8*(n-1))) == 0 && byte(v>>(8*(n-2)))&0x80 == 0 {
			n--
		}
		if n == 8 && v>>63 == 1 {
			n = 9 // a zero byte keeps it positive
		}
	} else {
		for n > 1 && byte(v>>(8*(n-1))) == 0xff && byte(v>>(8*(n-2)))&0x80 != 0 {
			n--
		}
	}
	e.raw(opLONG1, byte(n))
	for i := 0; i < n; i++ {
		if i < 8 {
			e.raw(byte(v >> (8 * i)))
		} else {
			e.raw(0)
		}
	}
}

// Str writes a str.
func (e *Encoder) Str(s string) {
	if len(s) < 256 {
		e.raw(opSHORT_BINUNICODE, byte(len(s)))
	} else {
		binary.LittleEndian.PutUint32(e.buf[:4], uint32(len(s)))
		e.raw(opBINUNICODE, e.buf[0], e.buf[1], e.buf[2], e.buf[3])
	}
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
	}
	e.value()
}

// Float writes a float.
func (e *Encoder) Float(f float64) {
	binary.BigEndian.PutUint64(e.buf[:8], math.Float64bits(f))
	e.raw(opBINFLOAT)
	e.raw(e.buf[:8]...)
	e.value()
}

// Bool writes True or False.
func (e *Encoder) Bool(b bool) {
	if b {
		e.raw(opNEWTRUE)
	} else {
		e.raw(opNEWFALSE)
	}
	e.value()
}

// None writes None.
func (e *Encoder) None() {
	e.raw(opNONE)
	e.value()
}

// BeginDict opens a dict: write its keys and values in turn, then EndDict.
func (e *Encoder) BeginDict() {
	e.raw(opEMPTY_DICT, opMARK)
	e.open = append(e.open, container{dict: true})
}

// EndDict closes the dict opened last.
func (e *Encoder) EndDict() { e.end(opSETITEMS) }

// BeginList opens a list: write its items, then EndList.
func (e *Encoder) BeginList() {
	e.raw(opEMPTY_LIST, opMARK)
	e.open = append(e.open, container{})
}

// EndList closes the list opened last.
func (e *Encoder) EndList() { e.end(opAPPENDS) }

func (e *Encoder) end(op byte) {
	e.raw(op)
	if len(e.open) > 0 {
		e.open = e.open[:len(e.open)-1]
	}
	e.value()
}

// IntPair writes the pair (a, b).
func (e *Encoder) IntPair(a, b int64) {
	// The pair is one value of its container: its members are not counted.
	open := e.open
	e.open = nil
	e.Int(a)
	e.Int(b)
	e.raw(opTUPLE2)
	e.open = open
	e.value()
}

// Close ends the pickle (a fragment has no end) and flushes it; it returns
// the first error met.
func (e *Encoder) Close() error {
	if !e.fragment {
		e.raw(opSTOP)
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	return e.err
}
