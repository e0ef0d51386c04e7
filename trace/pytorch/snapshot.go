package pytorch

import (
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// Summary describes an import.
type Summary struct {
	Input        string                    `json:"input"`
	Output       string                    `json:"output,omitempty"`
	InputBytes   int64                     `json:"input_bytes"`
	PickleBytes  int64                     `json:"pickle_bytes"`
	Events       int                       `json:"events"`
	Kinds        map[string]int            `json:"kinds"`
	Devices      []trace.DeviceID          `json:"devices"`
	Streams      []trace.StreamID          `json:"streams"`
	FirstNS      int64                     `json:"first_ns"`
	LastNS       int64                     `json:"last_ns"`
	Actions      map[string]map[string]int `json:"actions"` // device -> snapshot action -> entries
	Stacks       int                       `json:"stacked_events"`
	Markers      int                       `json:"markers"`
	EmptyCaches  int                       `json:"inferred_empty_caches"`
	InitialSegs  int                       `json:"initial_segments"`
	InitialBlks  int                       `json:"initial_blocks"`
	Approximate  []string                  `json:"approximate,omitempty"`
	Header       *trace.Header             `json:"-"`
	MidRun       bool                      `json:"mid_run"`
	UnknownActs  map[string]int            `json:"unknown_actions,omitempty"`
	ReservedInit uint64                    `json:"initial_reserved_bytes"`
	// StateOnly is set for a snapshot without trace entries (what
	// torch.cuda.memory_snapshot() or an OOM handler gives): its segments
	// are the trace's initial state, and it has no events.
	StateOnly bool `json:"state_only,omitempty"`
	// CapLikeBursts counts the release bursts right before a new segment
	// while no memory cap was known (Options.MemoryCapBytes): a capped
	// run's malloc retries, or garbage collection, look so.
	CapLikeBursts int `json:"cap_like_bursts,omitempty"`
	// PeakReserved is the most bytes reserved on one device, as far as the
	// empty_cache() inference followed it (0 when it did not run).
	PeakReserved uint64 `json:"peak_reserved_bytes,omitempty"`

	capKnown bool // the import knew the run's memory cap (Options.capBytes)
}

// event is a trace event waiting for its stack and text: the fields of
// trace.Event it can have, packed into 48 bytes (a snapshot may hold
// millions of entries).
type event struct {
	TimeNS    int64
	Addr      uint64 // an OOM's device free bytes (trace.Event.Aux): it has no address
	SizeBytes uint64
	Stream    trace.StreamID
	frames    pickle.Value // the entry's frames list, or noFrames
	text      int32        // index into Snapshot.texts; 0 for none
	Device    trace.DeviceID
	Kind      trace.Kind
	Marker    trace.MarkerKind
	set       uint16 // while streamed: which entry keys were set
}

// Event returns the trace event, without its stack and text.
func (e *event) Event() trace.Event {
	ev := trace.Event{Kind: e.Kind, Marker: e.Marker, Device: e.Device, Stream: e.Stream,
		TimeNS: e.TimeNS, Addr: e.Addr, SizeBytes: e.SizeBytes}
	if auxInAddr(e.Kind) {
		ev.Addr, ev.Aux = 0, e.Addr
	}
	return ev
}

// Snapshot is a decoded, converted snapshot ready to be written.
type Snapshot struct {
	header trace.Header
	// raw holds the trace entries' events as decoded (see
	// streamer.SetEntry), device after device: they are converted (see
	// entry) each time they are read. A large snapshot's are in a
	// temporary file.
	raw     *evlog
	unknown map[uint32]string // raw index -> the action of an entry whose action is unknown
	seqs    []devSeq          // the event sequences, merged by time when written
	ecs     evlog             // the inferred empty_cache() events, device after device
	texts   []string
	annot   map[int32]int32 // user_metadata string index + 1 -> its annotate text in texts
	doc     *pickle.Doc
	// stacks holds the events' stacks: an event's frames is its id there.
	stacks *stackTable
	// stacksUsed has bit i set when an event written has stack i (the
	// table may hold lists no event uses: a worker takes every list of
	// fetched frames it decodes, under whatever key); nil: not counted.
	stacksUsed []uint64
	summary    Summary
	par        pickle.ParallelStats // what the decoder's workers did
	pools      []FinalSegment       // the final segments and their pools (see InferPools)
}

// devSeq is a device's event sequence: its trace entries, with the
// empty_cache() events inferred among them and the annotations merged in by
// time.
type devSeq struct {
	dev          trace.DeviceID
	from, to     int     // its entries in raw
	ecFrom, ecTo int     // its inferred empty_cache() events in ecs
	markers      []event // its annotations, in time order
	// ext are its events from the snapshot's "fragsim" key (see
	// extension.go), each to go before its entry of index extPos.
	ext    []event
	extPos []int32
	conv   bool // its entries in raw are converted already (see entry)
	bare   bool // none of them has a stack or a text (putBlock need not look)
}

const noFrames = ^pickle.Value(0)

func (s *Snapshot) text(t string) int32 {
	if len(s.texts) == 0 {
		s.texts = append(s.texts, "")
	}
	s.texts = append(s.texts, t)
	return int32(len(s.texts) - 1)
}

// Header returns the trace header the snapshot converts to.
func (s *Snapshot) Header() *trace.Header { return &s.header }

// Summary returns the import summary (Events etc. are final after Load).
func (s *Snapshot) Summary() *Summary { return &s.summary }

// Close releases the temporary file holding a large snapshot's events.
// The file has no name once made where the system allows it (Unix), so
// nothing is left behind even without Close; elsewhere Close removes it.
// The snapshot cannot be written after.
func (s *Snapshot) Close() error {
	if s.raw != nil {
		s.raw.close()
	}
	s.ecs.close()
	return nil
}

// entry converts e, a copy of the raw event of one of dev's trace entries,
// into the event written; t is the time of the device's entry before (an
// entry without time_us has it) and becomes e's. It reports false for an
// entry without a known action (skipped).
func (s *Snapshot) entry(e *event, dev trace.DeviceID, t *int64) bool {
	if e.set&setTimeOK != 0 {
		*t = e.TimeNS
	}
	if e.set&setAction == 0 || e.Kind == trace.KindInvalid {
		return false
	}
	e.TimeNS, e.Device = *t, dev
	if e.frames != noFrames || e.Kind == trace.KindSnapshot || e.Kind == trace.KindMarker {
		s.entryRest(e)
	} else {
		e.text, e.set = 0, 0
	}
	return true
}

// entryRest is entry for an entry with frames, a snapshot or an annotate.
func (s *Snapshot) entryRest(e *event) {
	if e.frames != noFrames && len(s.stacks.stacks[e.frames]) == 0 {
		e.frames = noFrames
	}
	switch e.Kind {
	case trace.KindSnapshot:
		e.Addr = 0
	case trace.KindMarker:
		e.Marker = trace.MarkerText
		e.text = s.annotText(e.text)
		e.set = 0
		return
	}
	e.text, e.set = 0, 0
}

// annotText returns the text of an annotate entry whose user_metadata is
// the string of index meta-1 (0: none).
func (s *Snapshot) annotText(meta int32) int32 {
	if i, ok := s.annot[meta]; ok {
		return i
	}
	text := "annotate"
	if meta > 0 {
		if md := s.doc.StrAt(uint32(meta - 1)); md != "" {
			text += " " + md
		}
	}
	if s.annot == nil {
		s.annot = map[int32]int32{}
	}
	i := s.text(text)
	s.annot[meta] = i
	return i
}
