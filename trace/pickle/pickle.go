// Package pickle decodes the data-only subset of Python's pickle format (protocols 0-5) that PyTorch memory snapshots use, refusing every opcode that would construct an object or call code.
//
// Decoder.DecodeDoc decodes into a Doc: flat, pointer-free tables of values,
// containers and items addressed by Value, so that the millions of small
// dicts of a snapshot cost neither allocations nor garbage collection.
// Decoder.StreamEntries hands the trace entries of a memory snapshot to an
// EntryHandler as they are decoded instead of storing them.
// Decode (and Doc.ToAny) give the same data as a small Go representation:
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
	"errors"
	"fmt"
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
