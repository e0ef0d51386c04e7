package trace

// The wire spec: which fields each event kind carries in each format
// version. The encoder, the decoder and the text twin are all driven by it.

// Magic is the first bytes of every trace file.
const Magic = "FRAGSIM\x00"

// Version is the newest format version this package writes and reads.
const Version = 3

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
	allFields         = fieldAddr | fieldSize | fieldAux | fieldText | fieldMarker

	// fieldRepeat (version 2, spec only, never in an extra mask): when
	// the event does not encode its address or size, it has the previous
	// event's (in its chunk; zero for the first), not zero.
	fieldRepeat field = 1 << 5
	// fieldPush (version 2, spec only): the event's address and size
	// join the chunk's allocation ring.
	fieldPush field = 1 << 6
	// fieldRef (version 2, spec only): when the event does not encode its
	// address or size, the ring column holds j, and the event has the
	// address and size of the ring's (j+1)-th latest entry.
	fieldRef field = 1 << 7
)

// ringSize is the number of entries of version 2's allocation ring: the
// latest ringSize-1 allocations of a chunk can be referred to.
const ringSize = 1024

// kindFields lists the fields each kind carries: those the text twin
// always shows, and version 1's spec.
var kindFields = [32]field{
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
	KindDeviceMem:     fieldSize | fieldAux,
	KindPoolBegin:     fieldAux,
	KindPoolEnd:       fieldAux,
	KindPoolRelease:   fieldAux,
}

// spec lists, per format version, the fields each kind always encodes.
// A field outside the spec is encoded only when non-zero (or, for a
// fieldRepeat kind, when it differs from the previous event's), announced
// by flagExtra. New kinds and fields are appended, never renumbered.
var spec = [Version + 1][32]field{
	1: kindFields,
	2: spec2,
	// Version 3 is version 2 with the device-memory and pool kinds, whose
	// spec is their kindFields.
	3: spec2,
}

// spec2 is version 2's spec.
var spec2 = func() [32]field {
	s := kindFields
	// A free completes, nearly always, the block whose free was
	// requested just before: same address and size.
	s[KindFreeCompleted] = fieldRepeat
	// A free is requested, mostly, for a block allocated not long
	// before: one of the latest allocations.
	s[KindAlloc] |= fieldPush
	s[KindFreeRequested] = fieldRef
	return s
}()

// numKindsIn is, per format version, one more than its largest valid Kind.
var numKindsIn = [Version + 1]Kind{1: KindSnapshot + 1, 2: KindSnapshot + 1, 3: KindPoolRelease + 1}

// Version 2's address registers: an address is a delta from the last
// address encoded for an event of its size class, PyTorch's pools: small
// blocks (up to 1 MiB), large ones up to 10 MiB (served from 20 MiB
// segments) and larger ones (segments of their own). Their allocations
// and frees interleave, and a delta within a class is far smaller.
const (
	smallClassMax = 1 << 20
	largeClassMax = 10 << 20
	numAddrRegs   = 3
)

// sizeClass returns the address register of an event of size bytes.
func sizeClass(size uint64) int {
	return b2i(size > smallClassMax) + b2i(size > largeClassMax)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Version 2's time modes (the column header's timeMode): the time column
// holds each delta, in the chunk's time unit, as a uvarint when no delta
// of the chunk is negative, else zigzag'd as in version 1.
const (
	timeUnsigned = 0
	timeZigzag   = 1
)

// colHeaderLen is the number of uvarints of an events payload's column
// header in format version v, and the number of its data columns (after
// the type bytes), whose lengths end it.
func colHeaderLen(v int) (uvarints, columns int) {
	if v >= 2 {
		return 10, 5 // n timeUnit addrUnit sizeUnit timeMode len(T) len(A) len(S) len(M) len(R)
	}
	return 8, 4 // n timeUnit addrUnit sizeUnit len(T) len(A) len(S) len(M)
}

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
