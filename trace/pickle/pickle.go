// Package pickle decodes the data-only subset of Python's pickle format (protocols 0-5) that PyTorch memory snapshots use, refusing every opcode that would construct an object or call code.
//
// Values decode to a small Go representation:
//
//	None            nil
//	bool            bool
//	int             int64, or uint64 when it fits only unsigned (wider ints are an error)
//	float           float64
//	str, bytes      string (bytes are kept as their raw bytes)
//	list            *List (a pointer: pickles fill lists after memoizing them)
//	tuple           Tuple
//	dict            *Dict (insertion-ordered; int keys become their decimal text)
//
// Nothing is ever run: GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ,
// NEWOBJ_EX, EXT1/2/4, PERSID and BINPERSID are refused with an error naming the
// opcode and its byte offset (errors.Is(err, ErrUnsafe)). Every length and count
// is checked against the remaining input before anything is allocated, so no
// input makes the decoder panic or allocate much more than the input's size.
package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrUnsafe is matched (errors.Is) by the error for an opcode that would
// construct an object or call code.
var ErrUnsafe = errors.New("refused: the opcode constructs objects or calls code")

// ErrTruncated is matched (errors.Is) by the error for input that ends
// before the pickle's STOP opcode.
var ErrTruncated = errors.New("pickle ends early")

// ErrMalformed is matched (errors.Is) by every other decoding error.
var ErrMalformed = errors.New("malformed pickle")

// Error is a decoding error at a byte offset of the input.
type Error struct {
	Offset int64  // byte offset of the opcode (or of the input's end)
	Op     byte   // the opcode at Offset (0 when none)
	Msg    string // what was wrong
	Err    error  // ErrUnsafe, ErrTruncated or ErrMalformed
}

func (e *Error) Error() string {
	if e.Op != 0 {
		return fmt.Sprintf("pickle: byte offset %d: opcode %s (0x%02x): %s", e.Offset, OpName(e.Op), e.Op, e.Msg)
	}
	return fmt.Sprintf("pickle: byte offset %d: %s", e.Offset, e.Msg)
}

// Unwrap returns the error class.
func (e *Error) Unwrap() error { return e.Err }

// Tuple is a decoded Python tuple.
type Tuple []any

// List is a decoded Python list.
type List struct {
	Items []any
}

// Pair is one key/value pair of a Dict.
type Pair struct {
	Key   string
	Value any
}

// Dict is a decoded Python dict with string keys, in insertion order.
type Dict struct {
	Pairs []Pair
	index map[string]int // built once the dict grows past linearLimit
}

const linearLimit = 16

// Len returns the number of pairs.
func (d *Dict) Len() int { return len(d.Pairs) }

// Get returns the value stored under key.
func (d *Dict) Get(key string) (any, bool) {
	if d.index != nil {
		i, ok := d.index[key]
		if !ok {
			return nil, false
		}
		return d.Pairs[i].Value, true
	}
	for i := range d.Pairs {
		if d.Pairs[i].Key == key {
			return d.Pairs[i].Value, true
		}
	}
	return nil, false
}

// Set stores value under key, replacing an earlier value as Python does.
func (d *Dict) Set(key string, value any) {
	if d.index != nil {
		if i, ok := d.index[key]; ok {
			d.Pairs[i].Value = value
			return
		}
		d.index[key] = len(d.Pairs)
		d.Pairs = append(d.Pairs, Pair{key, value})
		return
	}
	for i := range d.Pairs {
		if d.Pairs[i].Key == key {
			d.Pairs[i].Value = value
			return
		}
	}
	d.Pairs = append(d.Pairs, Pair{key, value})
	if len(d.Pairs) > linearLimit {
		d.index = make(map[string]int, 2*len(d.Pairs))
		for i, p := range d.Pairs {
			d.index[p.Key] = i
		}
	}
}

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []string {
	keys := make([]string, len(d.Pairs))
	for i, p := range d.Pairs {
		keys[i] = p.Key
	}
	return keys
}

// Opcodes of the pickle format.
const (
	opMark           = '('
	opStop           = '.'
	opPop            = '0'
	opPopMark        = '1'
	opDup            = '2'
	opFloat          = 'F'
	opInt            = 'I'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opLong           = 'L'
	opBinInt2        = 'M'
	opNone           = 'N'
	opPersID         = 'P'
	opBinPersID      = 'Q'
	opReduce         = 'R'
	opString         = 'S'
	opBinString      = 'T'
	opShortBinString = 'U'
	opUnicode        = 'V'
	opBinUnicode     = 'X'
	opAppend         = 'a'
	opBuild          = 'b'
	opGlobal         = 'c'
	opDict           = 'd'
	opEmptyDict      = '}'
	opAppends        = 'e'
	opGet            = 'g'
	opBinGet         = 'h'
	opInst           = 'i'
	opLongBinGet     = 'j'
	opList           = 'l'
	opEmptyList      = ']'
	opObj            = 'o'
	opPut            = 'p'
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opSetItem        = 's'
	opTuple          = 't'
	opEmptyTuple     = ')'
	opSetItems       = 'u'
	opBinFloat       = 'G'
	opBinBytes       = 'B'
	opShortBinBytes  = 'C'
	opProto          = 0x80
	opNewObj         = 0x81
	opExt1           = 0x82
	opExt2           = 0x83
	opExt4           = 0x84
	opTuple1         = 0x85
	opTuple2         = 0x86
	opTuple3         = 0x87
	opNewTrue        = 0x88
	opNewFalse       = 0x89
	opLong1          = 0x8a
	opLong4          = 0x8b
	opShortBinUni    = 0x8c
	opBinUnicode8    = 0x8d
	opBinBytes8      = 0x8e
	opEmptySet       = 0x8f
	opAddItems       = 0x90
	opFrozenSet      = 0x91
	opNewObjEx       = 0x92
	opStackGlobal    = 0x93
	opMemoize        = 0x94
	opFrame          = 0x95
	opByteArray8     = 0x96
	opNextBuffer     = 0x97
	opReadonlyBuffer = 0x98
)

var opNames = map[byte]string{
	opMark: "MARK", opStop: "STOP", opPop: "POP", opPopMark: "POP_MARK", opDup: "DUP",
	opFloat: "FLOAT", opInt: "INT", opBinInt: "BININT", opBinInt1: "BININT1", opLong: "LONG",
	opBinInt2: "BININT2", opNone: "NONE", opPersID: "PERSID", opBinPersID: "BINPERSID",
	opReduce: "REDUCE", opString: "STRING", opBinString: "BINSTRING",
	opShortBinString: "SHORT_BINSTRING", opUnicode: "UNICODE", opBinUnicode: "BINUNICODE",
	opAppend: "APPEND", opBuild: "BUILD", opGlobal: "GLOBAL", opDict: "DICT",
	opEmptyDict: "EMPTY_DICT", opAppends: "APPENDS", opGet: "GET", opBinGet: "BINGET",
	opInst: "INST", opLongBinGet: "LONG_BINGET", opList: "LIST", opEmptyList: "EMPTY_LIST",
	opObj: "OBJ", opPut: "PUT", opBinPut: "BINPUT", opLongBinPut: "LONG_BINPUT",
	opSetItem: "SETITEM", opTuple: "TUPLE", opEmptyTuple: "EMPTY_TUPLE", opSetItems: "SETITEMS",
	opBinFloat: "BINFLOAT", opBinBytes: "BINBYTES", opShortBinBytes: "SHORT_BINBYTES",
	opProto: "PROTO", opNewObj: "NEWOBJ", opExt1: "EXT1", opExt2: "EXT2", opExt4: "EXT4",
	opTuple1: "TUPLE1", opTuple2: "TUPLE2", opTuple3: "TUPLE3", opNewTrue: "NEWTRUE",
	opNewFalse: "NEWFALSE", opLong1: "LONG1", opLong4: "LONG4",
	opShortBinUni: "SHORT_BINUNICODE", opBinUnicode8: "BINUNICODE8", opBinBytes8: "BINBYTES8",
	opEmptySet: "EMPTY_SET", opAddItems: "ADDITEMS", opFrozenSet: "FROZENSET",
	opNewObjEx: "NEWOBJ_EX", opStackGlobal: "STACK_GLOBAL", opMemoize: "MEMOIZE",
	opFrame: "FRAME", opByteArray8: "BYTEARRAY8", opNextBuffer: "NEXT_BUFFER",
	opReadonlyBuffer: "READONLY_BUFFER",
}

// OpName returns the pickle opcode's name, or "unknown".
func OpName(op byte) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return "unknown"
}

func isUnsafe(op byte) bool {
	switch op {
	case opGlobal, opStackGlobal, opReduce, opBuild, opInst, opObj, opNewObj, opNewObjEx,
		opExt1, opExt2, opExt4, opPersID, opBinPersID:
		return true
	}
	return false
}

// Limits on interning: short strings are shared so that a snapshot's
// repeated keys and file names cost one allocation each.
const (
	internMaxLen     = 128
	internMaxEntries = 1 << 20
)

// maxMemoGap bounds how far past the memo's end a PUT may store before the
// decoder switches to a map (so a hostile index cannot force a huge slice).
const maxMemoGap = 1 << 16

// memoHole marks a memo slot that was never stored.
type memoHole struct{}

// smallInts holds boxed small ints so that decoding them does not allocate.
var smallInts = func() (t [4096]any) {
	for i := range t {
		t[i] = int64(i)
	}
	return
}()

func boxInt(i int64) any {
	if i >= 0 && i < int64(len(smallInts)) {
		return smallInts[i]
	}
	return i
}

// slabSize is how many dicts, lists or pairs one slab allocation holds:
// a snapshot is millions of small dicts, and allocating them in slabs
// keeps the allocator and the garbage collector out of the way.
const slabSize = 512

func (d *Decoder) newDict() *Dict {
	if len(d.dicts) == 0 {
		d.dicts = make([]Dict, slabSize)
	}
	x := &d.dicts[0]
	d.dicts = d.dicts[1:]
	return x
}

func (d *Decoder) newList() *List {
	if len(d.lists) == 0 {
		d.lists = make([]List, slabSize)
	}
	x := &d.lists[0]
	d.lists = d.lists[1:]
	return x
}

// pairs returns an empty slice with room for exactly n pairs.
func (d *Decoder) pairs(n int) []Pair {
	if n > slabSize/4 {
		return make([]Pair, 0, n)
	}
	if len(d.pairSlab) < n {
		d.pairSlab = make([]Pair, 4*slabSize)
	}
	p := d.pairSlab[:0:n]
	d.pairSlab = d.pairSlab[n:]
	return p
}

// items returns a copy of v in slab storage (full capacity: appends copy).
func (d *Decoder) items(v []any) []any {
	n := len(v)
	if n > slabSize/4 {
		return append(make([]any, 0, n), v...)
	}
	if len(d.itemSlab) < n {
		d.itemSlab = make([]any, 4*slabSize)
	}
	p := d.itemSlab[:n:n]
	d.itemSlab = d.itemSlab[n:]
	copy(p, v)
	return p
}

// Decoder decodes one pickle held in memory.
type Decoder struct {
	data   []byte
	pos    int
	stack  []any
	marks  []int
	memo   []any
	sparse map[uint64]any // memo entries far past the slice's end
	intern map[string]string

	dicts    []Dict
	lists    []List
	pairSlab []Pair
	itemSlab []any

	// Progress, when set, is called about every ProgressEvery bytes
	// with the offset reached and the input's size.
	Progress      func(done, total int64)
	ProgressEvery int64
}

// NewDecoder returns a decoder of data.
func NewDecoder(data []byte) *Decoder {
	return &Decoder{data: data, intern: make(map[string]string, 1024),
		// Protocol 4 memoizes nearly every container and string.
		memo: make([]any, 0, min(len(data)/32+16, 1<<26))}
}

// Decode decodes the pickle in data.
func Decode(data []byte) (any, error) {
	return NewDecoder(data).Decode()
}

// Offset returns the byte offset the decoder has reached.
func (d *Decoder) Offset() int64 { return int64(d.pos) }

func (d *Decoder) errAt(off int, op byte, class error, format string, args ...any) error {
	return &Error{Offset: int64(off), Op: op, Msg: fmt.Sprintf(format, args...), Err: class}
}

func (d *Decoder) truncated(off int, op byte, what string) error {
	return &Error{Offset: int64(off), Op: op, Msg: fmt.Sprintf("input ends at byte %d inside %s", len(d.data), what), Err: ErrTruncated}
}

// need checks that n more bytes exist after the opcode at off.
func (d *Decoder) need(off int, op byte, n uint64) error {
	if n > uint64(len(d.data)-d.pos) {
		return d.truncated(off, op, fmt.Sprintf("an argument of %d bytes", n))
	}
	return nil
}

func (d *Decoder) str(b []byte) string {
	if len(b) <= internMaxLen {
		if s, ok := d.intern[string(b)]; ok {
			return s
		}
		s := string(b)
		if len(d.intern) < internMaxEntries {
			d.intern[s] = s
		}
		return s
	}
	return string(b)
}

func (d *Decoder) pop() any {
	v := d.stack[len(d.stack)-1]
	d.stack = d.stack[:len(d.stack)-1]
	return v
}

func (d *Decoder) memoGet(idx uint64) (any, bool) {
	if idx < uint64(len(d.memo)) {
		v := d.memo[idx]
		if _, hole := v.(memoHole); hole {
			return nil, false
		}
		return v, true
	}
	v, ok := d.sparse[idx]
	return v, ok
}

func (d *Decoder) memoPut(idx uint64, v any) {
	n := uint64(len(d.memo))
	switch {
	case idx < n:
		d.memo[idx] = v
	case idx == n:
		d.memo = append(d.memo, v)
	case idx-n <= maxMemoGap && d.sparse == nil:
		for uint64(len(d.memo)) < idx {
			d.memo = append(d.memo, memoHole{})
		}
		d.memo = append(d.memo, v)
	default:
		if d.sparse == nil {
			d.sparse = make(map[uint64]any)
		}
		d.sparse[idx] = v
	}
}

// line reads a newline-terminated argument (text opcodes of protocol 0).
func (d *Decoder) line(off int, op byte) (string, error) {
	rest := d.data[d.pos:]
	i := bytes.IndexByte(rest, '\n')
	if i < 0 {
		return "", d.truncated(off, op, "a text argument")
	}
	s := string(rest[:i])
	d.pos += i + 1
	return s, nil
}

// decodeLong decodes a little-endian two's complement integer.
func decodeLong(b []byte) (any, bool) {
	if len(b) == 0 {
		return int64(0), true
	}
	neg := b[len(b)-1]&0x80 != 0
	// Strip redundant sign bytes.
	for len(b) > 1 {
		last, prev := b[len(b)-1], b[len(b)-2]
		if (last == 0 && prev&0x80 == 0) || (last == 0xff && prev&0x80 != 0) {
			b = b[:len(b)-1]
			continue
		}
		break
	}
	if len(b) > 9 || (len(b) == 9 && (neg || b[8] != 0)) {
		return nil, false
	}
	var u uint64
	for i := min(len(b), 8) - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	if len(b) == 9 {
		return u, true // positive, needs all 64 bits
	}
	if neg {
		// Sign-extend.
		shift := uint(64 - 8*len(b))
		return int64(u<<shift) >> shift, true
	}
	if u > math.MaxInt64 {
		return u, true
	}
	return int64(u), true
}

// Decode decodes the pickle and returns its value.
func (d *Decoder) Decode() (any, error) {
	data := d.data
	total := int64(len(data))
	every := d.ProgressEvery
	if every <= 0 {
		every = 8 << 20
	}
	nextProgress := every
	for {
		if d.pos >= len(data) {
			return nil, &Error{Offset: total, Msg: "input ends before the STOP opcode", Err: ErrTruncated}
		}
		if d.Progress != nil && int64(d.pos) >= nextProgress {
			d.Progress(int64(d.pos), total)
			nextProgress = int64(d.pos) + every
		}
		off := d.pos
		op := data[off]
		d.pos++
		switch op {
		case opProto:
			if err := d.need(off, op, 1); err != nil {
				return nil, err
			}
			if p := data[d.pos]; p > 5 {
				return nil, d.errAt(off, op, ErrMalformed, "protocol %d is not supported (0 to 5 are)", p)
			}
			d.pos++
		case opFrame:
			if err := d.need(off, op, 8); err != nil {
				return nil, err
			}
			n := binary.LittleEndian.Uint64(data[d.pos:])
			d.pos += 8
			if err := d.need(off, op, n); err != nil {
				return nil, err
			}
		case opStop:
			if len(d.stack) != 1 {
				if len(d.stack) == 0 {
					return nil, d.errAt(off, op, ErrMalformed, "stack is empty")
				}
				return nil, d.errAt(off, op, ErrMalformed, "%d values left on the stack", len(d.stack))
			}
			if d.Progress != nil {
				d.Progress(int64(d.pos), total)
			}
			return d.stack[0], nil
		case opMark:
			d.marks = append(d.marks, len(d.stack))
		case opEmptyDict:
			d.stack = append(d.stack, d.newDict())
		case opEmptyList:
			d.stack = append(d.stack, d.newList())
		case opEmptyTuple:
			d.stack = append(d.stack, Tuple{})
		case opNone:
			d.stack = append(d.stack, nil)
		case opNewTrue:
			d.stack = append(d.stack, true)
		case opNewFalse:
			d.stack = append(d.stack, false)
		case opBinInt:
			if err := d.need(off, op, 4); err != nil {
				return nil, err
			}
			d.stack = append(d.stack, boxInt(int64(int32(binary.LittleEndian.Uint32(data[d.pos:])))))
			d.pos += 4
		case opBinInt1:
			if err := d.need(off, op, 1); err != nil {
				return nil, err
			}
			d.stack = append(d.stack, smallInts[data[d.pos]])
			d.pos++
		case opBinInt2:
			if err := d.need(off, op, 2); err != nil {
				return nil, err
			}
			d.stack = append(d.stack, boxInt(int64(binary.LittleEndian.Uint16(data[d.pos:]))))
			d.pos += 2
		case opLong1, opLong4:
			var n uint64
			if op == opLong1 {
				if err := d.need(off, op, 1); err != nil {
					return nil, err
				}
				n = uint64(data[d.pos])
				d.pos++
			} else {
				if err := d.need(off, op, 4); err != nil {
					return nil, err
				}
				n = uint64(int64(int32(binary.LittleEndian.Uint32(data[d.pos:]))))
				d.pos += 4
				if int64(n) < 0 {
					return nil, d.errAt(off, op, ErrMalformed, "negative length")
				}
			}
			if err := d.need(off, op, n); err != nil {
				return nil, err
			}
			v, ok := decodeLong(data[d.pos : d.pos+int(n)])
			if !ok {
				return nil, d.errAt(off, op, ErrMalformed, "integer of %d bytes does not fit in 64 bits", n)
			}
			d.pos += int(n)
			d.stack = append(d.stack, v)
		case opInt, opLong:
			s, err := d.line(off, op)
			if err != nil {
				return nil, err
			}
			if op == opInt && s == "00" {
				d.stack = append(d.stack, false)
				break
			}
			if op == opInt && s == "01" {
				d.stack = append(d.stack, true)
				break
			}
			s = strings.TrimSuffix(s, "L")
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				d.stack = append(d.stack, i)
			} else if u, err := strconv.ParseUint(s, 10, 64); err == nil {
				d.stack = append(d.stack, u)
			} else {
				return nil, d.errAt(off, op, ErrMalformed, "bad or too wide integer %q", s)
			}
		case opBinFloat:
			if err := d.need(off, op, 8); err != nil {
				return nil, err
			}
			d.stack = append(d.stack, math.Float64frombits(binary.BigEndian.Uint64(data[d.pos:])))
			d.pos += 8
		case opFloat:
			s, err := d.line(off, op)
			if err != nil {
				return nil, err
			}
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, d.errAt(off, op, ErrMalformed, "bad float %q", s)
			}
			d.stack = append(d.stack, f)
		case opShortBinUni, opShortBinBytes, opShortBinString:
			if err := d.need(off, op, 1); err != nil {
				return nil, err
			}
			n := int(data[d.pos])
			d.pos++
			if err := d.need(off, op, uint64(n)); err != nil {
				return nil, err
			}
			d.stack = append(d.stack, d.str(data[d.pos:d.pos+n]))
			d.pos += n
		case opBinUnicode, opBinBytes, opBinString:
			if err := d.need(off, op, 4); err != nil {
				return nil, err
			}
			n := uint64(binary.LittleEndian.Uint32(data[d.pos:]))
			if op == opBinString && int32(n) < 0 {
				return nil, d.errAt(off, op, ErrMalformed, "negative length")
			}
			d.pos += 4
			if err := d.need(off, op, n); err != nil {
				return nil, err
			}
			d.stack = append(d.stack, d.str(data[d.pos:d.pos+int(n)]))
			d.pos += int(n)
		case opBinUnicode8, opBinBytes8, opByteArray8:
			if err := d.need(off, op, 8); err != nil {
				return nil, err
			}
			n := binary.LittleEndian.Uint64(data[d.pos:])
			d.pos += 8
			if err := d.need(off, op, n); err != nil {
				return nil, err
			}
			d.stack = append(d.stack, d.str(data[d.pos:d.pos+int(n)]))
			d.pos += int(n)
		case opMemoize:
			if len(d.stack) == 0 {
				return nil, d.errAt(off, op, ErrMalformed, "stack is empty")
			}
			d.memoPut(uint64(len(d.memo)), d.stack[len(d.stack)-1])
		case opBinPut, opLongBinPut, opPut:
			var idx uint64
			switch op {
			case opBinPut:
				if err := d.need(off, op, 1); err != nil {
					return nil, err
				}
				idx = uint64(data[d.pos])
				d.pos++
			case opLongBinPut:
				if err := d.need(off, op, 4); err != nil {
					return nil, err
				}
				idx = uint64(binary.LittleEndian.Uint32(data[d.pos:]))
				d.pos += 4
			default:
				s, err := d.line(off, op)
				if err != nil {
					return nil, err
				}
				u, err := strconv.ParseUint(s, 10, 32)
				if err != nil {
					return nil, d.errAt(off, op, ErrMalformed, "bad memo index %q", s)
				}
				idx = u
			}
			if len(d.stack) == 0 {
				return nil, d.errAt(off, op, ErrMalformed, "stack is empty")
			}
			d.memoPut(idx, d.stack[len(d.stack)-1])
		case opBinGet, opLongBinGet, opGet:
			var idx uint64
			switch op {
			case opBinGet:
				if err := d.need(off, op, 1); err != nil {
					return nil, err
				}
				idx = uint64(data[d.pos])
				d.pos++
			case opLongBinGet:
				if err := d.need(off, op, 4); err != nil {
					return nil, err
				}
				idx = uint64(binary.LittleEndian.Uint32(data[d.pos:]))
				d.pos += 4
			default:
				s, err := d.line(off, op)
				if err != nil {
					return nil, err
				}
				u, err := strconv.ParseUint(s, 10, 32)
				if err != nil {
					return nil, d.errAt(off, op, ErrMalformed, "bad memo index %q", s)
				}
				idx = u
			}
			v, ok := d.memoGet(idx)
			if !ok {
				return nil, d.errAt(off, op, ErrMalformed, "memo index %d was never stored", idx)
			}
			d.stack = append(d.stack, v)
		case opPop:
			if len(d.stack) > 0 && (len(d.marks) == 0 || d.marks[len(d.marks)-1] < len(d.stack)) {
				d.stack = d.stack[:len(d.stack)-1]
			} else if len(d.marks) > 0 && d.marks[len(d.marks)-1] == len(d.stack) {
				d.marks = d.marks[:len(d.marks)-1] // Python's POP also pops a bare mark
			} else {
				return nil, d.errAt(off, op, ErrMalformed, "stack is empty")
			}
		case opPopMark:
			m, err := d.popMark(off, op)
			if err != nil {
				return nil, err
			}
			d.stack = d.stack[:m]
		case opDup:
			if len(d.stack) == 0 || (len(d.marks) > 0 && d.marks[len(d.marks)-1] == len(d.stack)) {
				return nil, d.errAt(off, op, ErrMalformed, "stack is empty")
			}
			d.stack = append(d.stack, d.stack[len(d.stack)-1])
		case opTuple1, opTuple2, opTuple3:
			n := int(op-opTuple1) + 1
			if err := d.have(off, op, n); err != nil {
				return nil, err
			}
			t := Tuple(d.items(d.stack[len(d.stack)-n:]))
			d.stack = append(d.stack[:len(d.stack)-n], t)
		case opTuple, opList:
			m, err := d.popMark(off, op)
			if err != nil {
				return nil, err
			}
			items := d.items(d.stack[m:])
			clear(d.stack[m:])
			d.stack = d.stack[:m]
			if op == opTuple {
				d.stack = append(d.stack, Tuple(items))
			} else {
				l := d.newList()
				l.Items = items
				d.stack = append(d.stack, l)
			}
		case opDict:
			m, err := d.popMark(off, op)
			if err != nil {
				return nil, err
			}
			dict := d.newDict()
			if err := d.setItems(off, op, dict, d.stack[m:]); err != nil {
				return nil, err
			}
			d.stack = append(d.stack[:m], dict)
		case opAppend:
			if err := d.have(off, op, 2); err != nil {
				return nil, err
			}
			l, ok := d.stack[len(d.stack)-2].(*List)
			if !ok {
				return nil, d.errAt(off, op, ErrMalformed, "appending to a %s, not a list", typeName(d.stack[len(d.stack)-2]))
			}
			l.Items = append(l.Items, d.stack[len(d.stack)-1])
			d.stack = d.stack[:len(d.stack)-1]
		case opAppends:
			m, err := d.popMark(off, op)
			if err != nil {
				return nil, err
			}
			if m == 0 {
				return nil, d.errAt(off, op, ErrMalformed, "no list below the mark")
			}
			l, ok := d.stack[m-1].(*List)
			if !ok {
				return nil, d.errAt(off, op, ErrMalformed, "appending to a %s, not a list", typeName(d.stack[m-1]))
			}
			if l.Items == nil {
				l.Items = d.items(d.stack[m:])
			} else {
				l.Items = append(l.Items, d.stack[m:]...)
			}
			clear(d.stack[m:])
			d.stack = d.stack[:m]
		case opSetItem:
			if err := d.have(off, op, 3); err != nil {
				return nil, err
			}
			n := len(d.stack)
			dict, ok := d.stack[n-3].(*Dict)
			if !ok {
				return nil, d.errAt(off, op, ErrMalformed, "setting an item of a %s, not a dict", typeName(d.stack[n-3]))
			}
			if err := d.setItems(off, op, dict, d.stack[n-2:]); err != nil {
				return nil, err
			}
			d.stack = d.stack[:n-2]
		case opSetItems:
			m, err := d.popMark(off, op)
			if err != nil {
				return nil, err
			}
			if m == 0 {
				return nil, d.errAt(off, op, ErrMalformed, "no dict below the mark")
			}
			dict, ok := d.stack[m-1].(*Dict)
			if !ok {
				return nil, d.errAt(off, op, ErrMalformed, "setting items of a %s, not a dict", typeName(d.stack[m-1]))
			}
			if err := d.setItems(off, op, dict, d.stack[m:]); err != nil {
				return nil, err
			}
			clear(d.stack[m:])
			d.stack = d.stack[:m]
		default:
			if isUnsafe(op) {
				return nil, &Error{Offset: int64(off), Op: op, Msg: "refused: it would construct an object or call code; a memory snapshot holds only plain data", Err: ErrUnsafe}
			}
			if _, known := opNames[op]; known {
				return nil, d.errAt(off, op, ErrMalformed, "not supported: a memory snapshot never holds it")
			}
			return nil, &Error{Offset: int64(off), Msg: fmt.Sprintf("unknown opcode 0x%02x", op), Err: ErrMalformed}
		}
	}
}

// have checks that n values are on the stack above the top mark.
func (d *Decoder) have(off int, op byte, n int) error {
	base := 0
	if len(d.marks) > 0 {
		base = d.marks[len(d.marks)-1]
	}
	if len(d.stack)-base < n {
		return d.errAt(off, op, ErrMalformed, "needs %d values on the stack, has %d", n, len(d.stack)-base)
	}
	return nil
}

func (d *Decoder) popMark(off int, op byte) (int, error) {
	if len(d.marks) == 0 {
		return 0, d.errAt(off, op, ErrMalformed, "no MARK on the stack")
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	return m, nil
}

func (d *Decoder) setItems(off int, op byte, dict *Dict, kv []any) error {
	if len(kv)%2 != 0 {
		return d.errAt(off, op, ErrMalformed, "odd number (%d) of keys and values", len(kv))
	}
	if dict.Pairs == nil && dict.index == nil {
		dict.Pairs = d.pairs(len(kv) / 2)
	}
	for i := 0; i < len(kv); i += 2 {
		var key string
		switch k := kv[i].(type) {
		case string:
			key = k
		case int64:
			key = strconv.FormatInt(k, 10)
		case uint64:
			key = strconv.FormatUint(k, 10)
		default:
			return d.errAt(off, op, ErrMalformed, "dict key of type %s (only str and int keys are supported)", typeName(kv[i]))
		}
		dict.Set(key, kv[i+1])
	}
	return nil
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64, uint64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case Tuple:
		return "tuple"
	case *List:
		return "list"
	case *Dict:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

// TypeName returns the Python type name of a decoded value.
func TypeName(v any) string { return typeName(v) }
