package trace

import "fmt"

// Kind is the type of a trace event. Its numeric values are part of the
// file format: never renumber them, only append.
type Kind uint8

// The event kinds. Names match PyTorch's trace actions where one exists.
const (
	KindInvalid       Kind = iota
	KindAlloc              // a request served: Addr, SizeBytes (requested, unrounded), Stream
	KindFreeRequested      // the program freed Addr; the block may still wait on other streams
	KindFreeCompleted      // the block at Addr went back to the allocator's free list
	KindSegmentAlloc       // device: cudaMalloc of SizeBytes at Addr (ground truth)
	KindSegmentFree        // device: cudaFree of the segment at Addr
	KindSegmentMap         // device: pages mapped at Addr (expandable segments)
	KindSegmentUnmap       // device: pages unmapped at Addr
	KindOOM                // the allocator gave up: SizeBytes requested (rounded), Aux = device free bytes
	KindEmptyCache         // torch.cuda.empty_cache() (recorded or inferred)
	KindSetFraction        // set_per_process_memory_fraction: Aux = math.Float64bits(fraction)
	KindMarker             // a marker: Aux = MarkerKind, Text = its text
	KindSnapshot           // PyTorch's "snapshot" action: SizeBytes = active bytes then
	numKinds
)

// NumKinds is one more than the largest valid Kind.
const NumKinds = int(numKinds)

var kindNames = [...]string{
	KindInvalid:       "invalid",
	KindAlloc:         "alloc",
	KindFreeRequested: "free_requested",
	KindFreeCompleted: "free_completed",
	KindSegmentAlloc:  "segment_alloc",
	KindSegmentFree:   "segment_free",
	KindSegmentMap:    "segment_map",
	KindSegmentUnmap:  "segment_unmap",
	KindOOM:           "oom",
	KindEmptyCache:    "empty_cache",
	KindSetFraction:   "set_fraction",
	KindMarker:        "marker",
	KindSnapshot:      "snapshot",
}

// String returns the kind's stable name, as used in JSON and the text twin.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind returns the Kind whose String is name.
func ParseKind(name string) (Kind, bool) {
	for k, n := range kindNames {
		if n == name && k != int(KindInvalid) {
			return Kind(k), true
		}
	}
	return KindInvalid, false
}

// IsDevice reports whether the kind is a device-level event of the allocator
// that ran when the trace was made: ground truth a replay is checked against,
// not a request to replay.
func (k Kind) IsDevice() bool {
	return k >= KindSegmentAlloc && k <= KindSegmentUnmap
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k > KindInvalid && k < numKinds }

// MarkerKind says what a marker marks.
type MarkerKind uint8

// Marker kinds.
const (
	MarkerText  MarkerKind = iota // free text
	MarkerStep                    // a step boundary; Text is the step's name or number
	MarkerAgent                   // from here on, requests on this thread come from agent Text
	MarkerModel                   // from here on, requests come from model Text
	MarkerBegin                   // a named region begins (PyTorch record_function START)
	MarkerEnd                     // a named region ends (record_function END)
	numMarkerKinds
)

var markerNames = [...]string{"text", "step", "agent", "model", "begin", "end"}

// String returns the marker kind's stable name.
func (m MarkerKind) String() string {
	if int(m) < len(markerNames) {
		return markerNames[m]
	}
	return fmt.Sprintf("marker(%d)", uint8(m))
}

// ParseMarkerKind returns the MarkerKind whose String is name.
func ParseMarkerKind(name string) (MarkerKind, bool) {
	for i, n := range markerNames {
		if n == name {
			return MarkerKind(i), true
		}
	}
	return 0, false
}

// DeviceID identifies a GPU within a trace (CUDA device ordinal).
type DeviceID int32

// StreamID is a raw cudaStream_t value; 0 is the legacy default stream.
type StreamID uint64

// DefaultStream is the legacy default stream.
const DefaultStream StreamID = 0

// StringID indexes a trace's string table; NoString (0) is the empty string.
type StringID uint32

// NoString is the empty string's ID.
const NoString StringID = 0

// StackID indexes a trace's stack table; NoStack (0) means no stack recorded.
type StackID uint32

// NoStack means the event carries no call stack.
const NoStack StackID = 0

// Event is one trace event: a small value type.
//
// Which fields are meaningful depends on Kind (see the Kind constants).
// Unused fields are zero.
type Event struct {
	Kind      Kind
	Marker    MarkerKind // KindMarker only
	Device    DeviceID
	Stream    StreamID
	TimeNS    int64  // nanoseconds since the Unix epoch (or since an arbitrary origin for synthetic traces)
	Addr      uint64 // block or segment address
	SizeBytes uint64 // requested bytes (alloc, frees), segment or range bytes (device events), rounded request (oom)
	Aux       uint64 // kind-specific: OOM device free bytes, fraction bits
	Text      StringID
	Stack     StackID
	// _ pads Event to 64 bytes: copies then move whole 16-byte words that
	// never overlap, which spares every ReadEvent a store-forwarding stall
	// (BenchmarkDecode: about 1.4 times faster than at 56 bytes).
	_ uint64
}

// Frame is one call-stack frame; strings are in the trace's string table.
type Frame struct {
	Func StringID
	File StringID
	Line uint32
}
