package trace

// The wire spec: which fields each event kind carries in each format
// version. The encoder, the decoder and the text twin are all driven by it.

// Magic is the first bytes of every trace file.
const Magic = "FRAGSIM\x00"

// Version is the newest format version this package writes and reads.
const Version = 1

// Chunk types (the low 7 bits of a chunk's type byte).
const (
	chunkHeader = 1 // JSON of Header; exactly one, first
	chunkTable  = 2 // string and stack definitions
	chunkEvents = 3 // events, column by column
	chunkEnd    = 4 // totals; last, written by Close
	numChunks   = 5

	chunkStored = 0x80 // type byte flag: payload stored without compression
)

// Event type-byte layout: the low 5 bits hold the Kind, the top 3 flags.
const (
	kindMask  = 0x1f
	flagDS    = 0x20 // device and stream changed: both follow in the misc column
	flagStack = 0x40 // a stack ID follows in the misc column
	flagExtra = 0x80 // a mask of fields beyond the kind's spec follows in the misc column
)

// field is a bit set of the optional event fields. Device, Stream, TimeNS
// and Stack are encoded for every event (device and stream only when they
// change, stack only when set) and have no bit.
type field uint8

const (
	fieldAddr   field = 1 << iota // addr column: zigzag delta from the previous address, in the chunk's address unit
	fieldSize                     // size column: uvarint in the chunk's size unit
	fieldAux                      // misc column: uvarint
	fieldText                     // misc column: uvarint string ID
	fieldMarker                   // misc column: uvarint MarkerKind
	allFields   = fieldAddr | fieldSize | fieldAux | fieldText | fieldMarker
)

// spec lists, per format version, the fields each kind always encodes.
// A field outside the spec is encoded only when non-zero, announced by
// flagExtra. New kinds and fields are appended, never renumbered.
var spec = [Version + 1][32]field{
	1: {
		KindAlloc:         fieldAddr | fieldSize,
		KindFreeRequested: fieldAddr | fieldSize,
		KindFreeCompleted: fieldAddr | fieldSize,
		KindSegmentAlloc:  fieldAddr | fieldSize,
		KindSegmentFree:   fieldAddr | fieldSize,
		KindSegmentMap:    fieldAddr | fieldSize,
		KindSegmentUnmap:  fieldAddr | fieldSize,
		KindOOM:           fieldSize | fieldAux,
		KindEmptyCache:    0,
		KindSetFraction:   fieldAux,
		KindMarker:        fieldMarker | fieldText,
		KindSnapshot:      fieldSize,
	},
}

// numKindsIn is, per format version, one more than its largest valid Kind.
var numKindsIn = [Version + 1]Kind{1: KindSnapshot + 1}

// fieldsOf returns the set of optional fields e carries beyond none.
func fieldsOf(e *Event) field {
	var f field
	if e.Addr != 0 {
		f |= fieldAddr
	}
	if e.SizeBytes != 0 {
		f |= fieldSize
	}
	if e.Aux != 0 {
		f |= fieldAux
	}
	if e.Text != 0 {
		f |= fieldText
	}
	if e.Marker != 0 {
		f |= fieldMarker
	}
	return f
}

// Limits checked before allocating, so corrupt lengths cannot exhaust memory.
const (
	maxChunkRaw    = 64 << 20 // uncompressed bytes of one chunk
	maxChunkEvents = 1 << 20  // events of one chunk
	maxStringLen   = 1 << 20  // bytes of one string
	maxStackFrames = 1 << 14  // frames of one stack
	maxTableIDs    = 1 << 31  // strings or stacks of one trace
)
