package pickle

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

// opClass says what the decoder does with an opcode: the one place that
// decides what a pickle may make the decoder do.
type opClass uint8

const (
	opUnknown     opClass = iota // not a pickle opcode: malformed
	opData                       // plain data: decoded
	opUnsupported                // a pickle opcode a memory snapshot never holds (sets, out-of-band buffers): malformed
	opUnsafe                     // constructs an object or calls code: refused (ErrUnsafe)
)

// opArg is how an opcode's argument follows it in the input.
type opArg uint8

const (
	argNone  opArg = iota
	argU1          // 1 byte
	argU2          // 2 bytes, little-endian
	argU4          // 4 bytes, little-endian
	argU8          // 8 bytes (FRAME's length, little-endian; BINFLOAT's float, big-endian)
	argLen1        // a 1-byte length, then that many bytes
	argLen4        // a 4-byte little-endian length, then that many bytes
	argLen8        // an 8-byte little-endian length, then that many bytes
	argLine        // text up to a newline (protocol 0)
	argLine2       // two lines of text (GLOBAL, INST)
)

// prefix returns the bytes of the fixed-size part of the argument: the
// whole of a fixed-size one, the length of a counted one.
func (a opArg) prefix() uint64 {
	switch a {
	case argU1, argLen1:
		return 1
	case argU2:
		return 2
	case argU4, argLen4:
		return 4
	case argU8, argLen8:
		return 8
	}
	return 0
}

// The decoder's paths other than its general one (step), each of which
// decodes only the opcodes whose entry in opTable has its bit; on any other
// opcode it leaves the input to the general path, which decodes what is
// opData and refuses the rest.
const (
	pathInline  = 1 << iota // DecodeDoc's loop
	pathEntry               // fastEntry: a streamed entry's keys, values and end
	pathRefList             // refList: a worker's list of fetched frames
	pathChunk               // parallel decodeAt: a worker's chunk between entries
)

// opInfo is what the decoder knows of an opcode.
type opInfo struct {
	name  string
	class opClass
	arg   opArg
	paths uint8 // the paths besides step that decode it
}

// opTable holds every opcode's facts, by opcode; a zero entry is an
// unknown opcode.
var opTable = [256]opInfo{
	opMark:           {"MARK", opData, argNone, pathInline | pathRefList | pathChunk},
	opStop:           {"STOP", opData, argNone, 0},
	opPop:            {"POP", opData, argNone, 0},
	opPopMark:        {"POP_MARK", opData, argNone, 0},
	opDup:            {"DUP", opData, argNone, 0},
	opFloat:          {"FLOAT", opData, argLine, 0},
	opInt:            {"INT", opData, argLine, 0},
	opBinInt:         {"BININT", opData, argU4, pathInline | pathEntry},
	opBinInt1:        {"BININT1", opData, argU1, pathInline | pathEntry},
	opLong:           {"LONG", opData, argLine, 0},
	opBinInt2:        {"BININT2", opData, argU2, pathInline | pathEntry},
	opNone:           {"NONE", opData, argNone, pathEntry},
	opPersID:         {"PERSID", opUnsafe, argLine, 0},
	opBinPersID:      {"BINPERSID", opUnsafe, argNone, 0},
	opReduce:         {"REDUCE", opUnsafe, argNone, 0},
	opString:         {"STRING", opData, argLine, 0},
	opBinString:      {"BINSTRING", opData, argLen4, 0},
	opShortBinString: {"SHORT_BINSTRING", opData, argLen1, 0},
	opUnicode:        {"UNICODE", opData, argLine, 0},
	opBinUnicode:     {"BINUNICODE", opData, argLen4, 0},
	opAppend:         {"APPEND", opData, argNone, pathRefList},
	opBuild:          {"BUILD", opUnsafe, argNone, 0},
	opGlobal:         {"GLOBAL", opUnsafe, argLine2, 0},
	opDict:           {"DICT", opData, argNone, 0},
	opEmptyDict:      {"EMPTY_DICT", opData, argNone, pathInline | pathChunk},
	opAppends:        {"APPENDS", opData, argNone, pathInline | pathRefList | pathChunk},
	opGet:            {"GET", opData, argLine, 0},
	opBinGet:         {"BINGET", opData, argU1, pathInline | pathEntry | pathRefList},
	opInst:           {"INST", opUnsafe, argLine2, 0},
	opLongBinGet:     {"LONG_BINGET", opData, argU4, pathInline | pathEntry | pathRefList},
	opList:           {"LIST", opData, argNone, 0},
	opEmptyList:      {"EMPTY_LIST", opData, argNone, pathInline | pathEntry},
	opObj:            {"OBJ", opUnsafe, argNone, 0},
	opPut:            {"PUT", opData, argLine, 0},
	opBinPut:         {"BINPUT", opData, argU1, 0},
	opLongBinPut:     {"LONG_BINPUT", opData, argU4, 0},
	opSetItem:        {"SETITEM", opData, argNone, 0},
	opTuple:          {"TUPLE", opData, argNone, 0},
	opEmptyTuple:     {"EMPTY_TUPLE", opData, argNone, 0},
	opSetItems:       {"SETITEMS", opData, argNone, pathInline | pathEntry},
	opBinFloat:       {"BINFLOAT", opData, argU8, pathEntry},
	opBinBytes:       {"BINBYTES", opData, argLen4, 0},
	opShortBinBytes:  {"SHORT_BINBYTES", opData, argLen1, 0},
	opProto:          {"PROTO", opData, argU1, 0},
	opNewObj:         {"NEWOBJ", opUnsafe, argNone, 0},
	opExt1:           {"EXT1", opUnsafe, argU1, 0},
	opExt2:           {"EXT2", opUnsafe, argU2, 0},
	opExt4:           {"EXT4", opUnsafe, argU4, 0},
	opTuple1:         {"TUPLE1", opData, argNone, 0},
	opTuple2:         {"TUPLE2", opData, argNone, 0},
	opTuple3:         {"TUPLE3", opData, argNone, 0},
	opNewTrue:        {"NEWTRUE", opData, argNone, pathEntry},
	opNewFalse:       {"NEWFALSE", opData, argNone, pathEntry},
	opLong1:          {"LONG1", opData, argLen1, pathInline | pathEntry},
	opLong4:          {"LONG4", opData, argLen4, 0},
	opShortBinUni:    {"SHORT_BINUNICODE", opData, argLen1, pathInline | pathEntry},
	opBinUnicode8:    {"BINUNICODE8", opData, argLen8, 0},
	opBinBytes8:      {"BINBYTES8", opData, argLen8, 0},
	opEmptySet:       {"EMPTY_SET", opUnsupported, argNone, 0},
	opAddItems:       {"ADDITEMS", opUnsupported, argNone, 0},
	opFrozenSet:      {"FROZENSET", opUnsupported, argNone, 0},
	opNewObjEx:       {"NEWOBJ_EX", opUnsafe, argNone, 0},
	opStackGlobal:    {"STACK_GLOBAL", opUnsafe, argNone, 0},
	opMemoize:        {"MEMOIZE", opData, argNone, pathInline | pathEntry | pathRefList},
	opFrame:          {"FRAME", opData, argU8, pathEntry | pathRefList | pathChunk},
	opByteArray8:     {"BYTEARRAY8", opData, argLen8, 0},
	opNextBuffer:     {"NEXT_BUFFER", opUnsupported, argNone, 0},
	opReadonlyBuffer: {"READONLY_BUFFER", opUnsupported, argNone, 0},
}

// OpName returns the pickle opcode's name, or "unknown".
func OpName(op byte) string {
	if n := opTable[op].name; n != "" {
		return n
	}
	return "unknown"
}
