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
	// KindDeviceMem (format version 3) is a sample of the device's memory,
	// as cuMemGetInfo reports it: SizeBytes = the device's free bytes, Aux =
	// its total bytes. Device is the sampled device.
	KindDeviceMem
	// KindPoolBegin (format version 3): from here on, allocations are
	// routed to a private pool (CUDA graph capture, or torch.cuda.MemPool
	// with use_mem_pool). Stream is the capture stream (0 for a MemPool
	// routed by thread), Aux the pool's ID (see PoolID).
	KindPoolBegin
	// KindPoolEnd (format version 3): the routing begun by the pool_begin
	// of the same Stream and Aux ends.
	KindPoolEnd
	// KindPoolRelease (format version 3): the private pool Aux is released
	// (its graph freed); its free segments go back to the device.
	KindPoolRelease
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
	KindDeviceMem:     "device_mem",
	KindPoolBegin:     "pool_begin",
	KindPoolEnd:       "pool_end",
	KindPoolRelease:   "pool_release",
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

// PoolID folds PyTorch's MempoolId_t, a pair (a, b), into the one number
// a pool event's Aux holds: a when a is not zero (graph pools and
// user-created MemPools count up in a), else b with the top bit set
// (pools PyTorch numbers in b). The default pool (0, 0) is 1<<63; it never
// appears in a pool event.
func PoolID(a, b uint64) uint64 {
	if a != 0 {
		return a
	}
	return b | 1<<63
}

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
	Aux       uint64 // kind-specific: OOM device free bytes, fraction bits, device total bytes, pool ID
	Text      StringID
	Stack     StackID
	// _ pads Event to 64 bytes: copies then move whole 16-byte words that
	// never overlap, which spares every ReadEvent a store-forwarding stall
	// (see BenchmarkDecode).
	_ uint64
}

// Frame is one call-stack frame; strings are in the trace's string table.
type Frame struct {
	Func StringID
	File StringID
	Line uint32
}
