// Package pytorch imports PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot) into fragsim traces, without running any code the file holds.
//
// A snapshot is a pickled dict: the final `segments`, one ring buffer of
// trace entries per device in `device_traces`, `allocator_settings` and
// `external_annotations`. Load decodes it with the restricted decoder of
// package trace/pickle (no opcode that constructs objects or calls code is
// accepted), maps every trace action to a trace.Event, merges the devices and
// the annotations by time, and derives what the snapshot does not say:
//
//   - Initial state. The ring buffer may have dropped the run's first entries.
//     The allocator state at the first kept entry is rebuilt from the final
//     segments by undoing the trace backwards (as PyTorch's memory_viz does).
//     Blocks that were live at the first entry and freed later are not in the
//     final segments: their size is PyTorch's round_size of the request, widened
//     to the next boundary when a large-pool block could not have been split
//     (remainder of at most 1 MiB); where even that is uncertain (requests of at
//     least max_split_size) the header is marked approximate.
//
//   - empty_cache(). PyTorch does not trace it. A burst of segment_free /
//     segment_unmap entries that no OOM follows is taken for a user
//     empty_cache() unless it may be the malloc's own release: that needs the
//     next entry to be a segment_alloc/segment_map (a malloc that missed the
//     free lists) and either a memory cap the malloc would have crossed
//     (known only through Options.MemoryCapBytes), or garbage collection
//     (garbage_collection_threshold > 0, and a burst of whole large-pool
//     segments only). Without a known cap every other burst is an
//     empty_cache(). Limits: an empty_cache() that releases nothing leaves no
//     trace and cannot be seen; an empty_cache() directly followed by a malloc
//     that releases memory itself reads as one burst; a burst that may be GC is
//     not counted and the header says so.
//
// Memory. The entries are converted as the decoder meets them, into 48-byte
// events. Up to about a million entries the events stay in memory; beyond,
// they go to a temporary file (Options.SpillDir; unnamed, so nothing is left
// behind), which the initial state (backwards), the empty_cache() inference,
// the summary and the write (the devices and annotations merged by time)
// read a block at a time: the import then holds the live allocator state,
// the decoder's own tables and fixed buffers, not the events. Stacks stay in
// the decoded pickle (the events refer to their frames lists).
package pytorch

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
	"github.com/klauspost/compress/zstd"
)

// Options control an import.
type Options struct {
	// NoInferEmptyCache turns off the inference of empty_cache() calls.
	NoInferEmptyCache bool
	// MemoryCapBytes is the per-process memory cap the run had (fraction ×
	// device total), when known: it lets release bursts that came from a
	// malloc's retry be told apart from empty_cache(). 0 means unknown.
	MemoryCapBytes uint64
	// MemoryFraction, when set, is stored in the header.
	MemoryFraction float64
	// Meta holds what the snapshot cannot say (GPU, its total memory,
	// versions, tags); its non-zero fields are merged into the header.
	Meta *trace.Header
	// Progress, when set, is called now and then with the phase
	// ("read", "decode", "convert", "write") and how far it is.
	Progress func(phase string, done, total int64)
	// MaxInputBytes bounds the decompressed pickle size (0: 64 GiB).
	MaxInputBytes int64

	// SpillDir is where a snapshot of more than a million or so trace
	// entries keeps its events while it is converted and written, in a
	// temporary file removed at once (where the system allows) or at the
	// end; "": os.TempDir(), or the output's directory for ImportFile.
	SpillDir string

	// Workers is how many goroutines decode the trace entries ahead of
	// the pickle decoder: 0 means one per CPU (runtime.GOMAXPROCS), 1
	// none. The result is the same either way.
	Workers int

	// tune overrides how the workers share the decode (tests).
	tune *pickle.ParallelTuning

	// prepare, when set, is called once the decoder has gone through
	// prepareShare of a streamed pickle (see ImportFile), with the
	// entries it expects in all.
	prepare func(events int)
}

// parallelMin is the events of a device from which its initial state is
// rebuilt, and its events converted, on several goroutines. (From 64K,
// empty_cache's 62K events were undone and converted on one, 1.5-3 ms of
// its import on the H200 host.)
var parallelMin = 1 << 14

// workers returns how many goroutines the conversion of a device of n
// events may use: Options.Workers (or one per core), at most 16, and at
// most one per partMin events. (At most 8 before the undo's parts were sorted
// once: 16 on the H200 host took baseline_s1's import from 11.5 to 10.9
// ms, kv_decode_s1's from 37 to 34.5.)
func (c *converter) workers(n int) int {
	k := runtime.GOMAXPROCS(0)
	if c.opt.Workers > 0 {
		k = c.opt.Workers
	}
	return min(k, 16, max(n/partMin, 1))
}

// partMin is the fewest events a goroutine of the conversion takes.
var partMin = 1 << 13

// prepareShare is how far through the pickle the decoder is when the
// trace writer starts being prepared: not at once, so that the decoder's
// own tables are faulted in first on the other core.
const prepareShare = 1.0 / 3

// chunkEvents returns the events of a chunk of an imported trace of n
// events: the writer's default, or fewer, down to an eighth of it, so
// that a trace of fewer than 16 default chunks is still cut into about
// 16, compressed at once on as many cores. A trace's chunks depend on its
// events alone, so an import writes the same bytes on every machine.
// (Eighth chunks made baseline_s1's trace 11% larger than whole ones,
// 5.5% larger than quarter chunks; against quarter chunks, on the H200
// host's 16 cores, they took baseline_s1's import from 15.6 to 14.2 ms,
// ring's from 10.8 to 9.4, kv_decode_s1's from 50 to 45.)
func chunkEvents(n int) int {
	return min(max(n/16, trace.DefaultChunkEvents/8), trace.DefaultChunkEvents)
}

// maxPrepared is how many zstd encoders ImportFile has made during the
// decode, at most (about 1.5 MiB each): on the H200 host, baseline_s1's 8
// compressors made 6 of them after the decode, each faulting in its
// match tables while compressing its first chunk.
const maxPrepared = 8

// WriterOptions returns the options of the trace writer that ImportFile
// writes s with: its chunks' size (in events alone, so that the writer
// need not measure the events before compressing them), and their
// compression on every core.
func (s *Snapshot) WriterOptions() []trace.WriterOption {
	opts := []trace.WriterOption{trace.ChunkEvents(chunkEvents(s.summary.Events)), trace.ChunksByEvents()}
	if n := compressors(s.summary.Events); n > 1 {
		opts = append(opts, trace.Concurrency(n))
	}
	return append(opts, level(s.summary.Events)...)
}

// level returns the writer's compression level option for an imported
// trace of n events: zstd's fastest from fastMin events, else its
// default.
func level(n int) []trace.WriterOption {
	if n >= fastMin {
		return []trace.WriterOption{trace.FastCompression()}
	}
	return nil
}

// fastMin is the events from which an imported trace is compressed at
// zstd's fastest level (trace.FastCompression): then it has 2 chunks or
// more (see chunkEvents), an encoder for each on as many cores, and each
// new encoder's match tables are fresh memory to fault in (1.25 MiB at
// the default level, 256 KiB at the fastest). On the H200 host, the whole
// command, best of 9: baseline_s1 23.5 -> 17.5 ms, train_s1 24.8 -> 19.8,
// kv_decode_s1 46 -> 41, ring 13.3 -> 11.2, empty_cache 15.1 -> 13.8. The
// traces are 2-10% larger (train_s1's 3.30x smaller than its gzip'd
// pickle, the least); a trace of one chunk lost more (fraction_retry 19%:
// 2.76x), and keeps the default.
const fastMin = 2 * trace.DefaultChunkEvents / 8

// compressors returns how many goroutines compress the chunks of an
// imported trace of n events: one per core, at most one per chunk.
func compressors(n int) int {
	c := chunkEvents(n)
	return max(min(runtime.GOMAXPROCS(0), (n+c-1)/c), 1)
}

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
	if e.Kind == trace.KindOOM {
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
	stacks  *stackTable
	summary Summary
	par     pickle.ParallelStats // what the decoder's workers did
	pools   []FinalSegment       // the final segments and their pools (see InferPools)
}

// devSeq is a device's event sequence: its trace entries, with the
// empty_cache() events inferred among them and the annotations merged in by
// time.
type devSeq struct {
	dev          trace.DeviceID
	from, to     int     // its entries in raw
	ecFrom, ecTo int     // its inferred empty_cache() events in ecs
	markers      []event // its annotations, in time order
	conv         bool    // its entries in raw are converted already (see entry)
	bare         bool    // none of them has a stack or a text (putBlock need not look)
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

// Error is an import error; it names the input and, for decoding errors,
// the byte offset of the decompressed pickle.
type Error struct {
	Name string
	Err  error
}

func (e *Error) Error() string { return e.Name + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// ReadInput reads r whole, decompressing gzip or zstd when the data starts
// with their magic bytes.
func ReadInput(r io.Reader, opt Options) ([]byte, error) {
	limit := opt.MaxInputBytes
	if limit <= 0 {
		limit = 64 << 30
	}
	var hint int64 = 1 << 20
	switch x := r.(type) {
	case *os.File:
		if st, err := x.Stat(); err == nil && st.Mode().IsRegular() {
			hint = st.Size() + 1
		}
	case interface{ Len() int }:
		hint = int64(x.Len()) + 1
	}
	raw, err := readAll(&progressReader{r: r, p: opt.Progress}, min(hint, limit+1), limit)
	if err != nil {
		return nil, err
	}
	return decompress(raw, limit)
}

// decompress returns raw, or its decompression when it starts with the
// magic bytes of gzip or zstd.
func decompress(raw []byte, limit int64) ([]byte, error) {
	switch {
	case bytes.HasPrefix(raw, gzipMagic):
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		out, err := readAll(zr, min(int64(len(raw))*6, limit+1), limit)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return out, nil
	case bytes.HasPrefix(raw, zstdMagic):
		zr, err := zstd.NewReader(bytes.NewReader(raw), zstd.WithDecoderMaxMemory(uint64(limit)), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		out, err := readAll(zr, min(int64(len(raw))*6, limit+1), limit)
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return out, nil
	}
	return raw, nil
}

// readAll reads r to its end into a buffer of capacity hint, failing past limit.
func readAll(r io.Reader, hint, limit int64) ([]byte, error) {
	buf := make([]byte, 0, max(hint, 512))
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, fmt.Errorf("input exceeds %d bytes", limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("after %d bytes: %w", len(buf), err)
		}
	}
}

type progressReader struct {
	r    io.Reader
	p    func(string, int64, int64)
	n    int64
	next int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.p != nil && p.n >= p.next {
		p.p("read", p.n, -1)
		p.next = p.n + 16<<20
	}
	return n, err
}

// Load reads and converts a snapshot; name is used in errors. When the
// snapshot is cut short, Load returns the error and, if trace entries were
// decoded before the cut, a Snapshot of them too (its header says so).
func Load(r io.Reader, name string, opt Options) (*Snapshot, error) {
	data, err := ReadInput(r, opt)
	if err != nil {
		return nil, &Error{name, err}
	}
	s, err := LoadPickle(data, opt)
	if s != nil {
		s.summary.Input = name
	}
	if err != nil {
		return s, &Error{name, err}
	}
	return s, nil
}

// loadMapped is Load of a snapshot file mapped into memory at data.
func loadMapped(data []byte, name string, opt Options) (*Snapshot, error) {
	limit := opt.MaxInputBytes
	if limit <= 0 {
		limit = 64 << 30
	}
	if int64(len(data)) > limit {
		return nil, &Error{name, fmt.Errorf("input exceeds %d bytes", limit)}
	}
	if opt.Progress != nil {
		opt.Progress("read", int64(len(data)), -1)
	}
	pk, err := decompress(data, limit)
	if err != nil {
		return nil, &Error{name, err}
	}
	var release func(int)
	if len(pk) > 0 && &pk[0] == &data[0] {
		release = releaser(data) // the pickle is the mapping itself
	}
	s, err := loadPickleRelease(pk, opt, release)
	if s != nil {
		s.summary.Input = name
	}
	if err != nil {
		return s, &Error{name, err}
	}
	return s, nil
}

// LoadPickle converts an uncompressed snapshot pickle. Like Load, it
// returns the entries before the cut of a cut-off pickle with its error.
//
// The trace entries are converted into events as the decoder meets them
// (streamed), so that the import holds the events, not a decoded tree of
// the whole pickle. A snapshot the streaming path cannot follow (an entry
// dict shared or changed after its list took it, a key set twice, any
// error) is decoded again as a whole, which gives the same events or the
// precise error.
func LoadPickle(data []byte, opt Options) (*Snapshot, error) {
	return loadPickleRelease(data, opt, nil)
}

// loadPickleRelease is LoadPickle, calling release (when not nil) with
// offsets of data that it no longer reads.
func loadPickleRelease(data []byte, opt Options, release func(int)) (*Snapshot, error) {
	s, err := loadPickle(data, opt, true, release)
	var se *SpillError
	if err == nil || errors.As(err, &se) {
		return s, err
	}
	return loadPickle(data, opt, false, release)
}

func loadPickle(data []byte, opt Options, stream bool, release func(int)) (_ *Snapshot, err error) {
	dec := pickle.NewDecoder(data)
	dec.Consumed = release
	if opt.Progress != nil {
		dec.Progress = func(done, total int64) { opt.Progress("decode", done, total) }
	}
	var st *streamer
	if stream {
		st = &streamer{conv: conv{doc: dec.Doc()}, dec: dec, size: len(data), prepareAt: math.MaxInt}
		st.log.dir = opt.SpillDir
		defer func() {
			if st.log.err != nil || err != nil {
				st.log.close()
			}
		}()
		if opt.prepare != nil {
			st.prepareAt, st.prepare = int(float64(len(data))*prepareShare), opt.prepare
		}
		dec.StreamEntries("device_traces", st)
		dec.Workers, dec.Tuning = opt.Workers, opt.tune
		if dec.Workers == 0 {
			dec.Workers = runtime.GOMAXPROCS(0)
		}
	}
	doc, err := dec.DecodeDoc()
	if st != nil {
		st.wait() // Merge's copies
		st.idle()
	}
	if err != nil && stream {
		if st.log.err != nil {
			return nil, st.log.err // not an error of the pickle's
		}
		return nil, err
	}
	if err != nil {
		if errors.Is(err, pickle.ErrTruncated) {
			if s := salvage(dec, opt, len(data), err); s != nil {
				return s, err
			}
		}
		return nil, err
	}
	root := doc.Root()
	if k := doc.Kind(root); k != pickle.KindDict {
		return nil, fmt.Errorf("not a memory snapshot: the pickle holds a %s, not a dict", k)
	}
	// Everything but the trace entries is small: take it as Go values.
	top := &pickle.Dict{}
	traces := noFrames
	var segs pickle.Value
	hasSegs := false
	var convErr error
	doc.Pairs(root, func(k, v pickle.Value) bool {
		key, _ := doc.Str(k)
		if key == "device_traces" {
			traces = v
			top.Set(key, nil)
			return true
		}
		if key == "segments" { // read where it is (finalStates)
			segs, hasSegs = v, true
			top.Set(key, nil)
			return true
		}
		a, err := doc.ToAny(v)
		if err != nil {
			convErr = fmt.Errorf("snapshot key %q: %w", key, err)
			return false
		}
		top.Set(key, a)
		return true
	})
	if convErr != nil {
		return nil, convErr
	}
	c := &converter{opt: opt, snap: &Snapshot{doc: doc, stacks: &stackTable{}, par: dec.ParallelStats()}, doc: doc, traces: traces, stream: st,
		segs: segs, hasSegs: hasSegs}
	c.snap.ecs.dir = opt.SpillDir
	c.snap.summary.PickleBytes = int64(len(data))
	if err := c.convert(top); err != nil {
		c.snap.Close()
		return nil, err
	}
	return c.snap, nil
}

// salvage rebuilds what a cut-off snapshot held before the cut: the trace
// entries already decoded (the device lists on the decoder's stack and the
// whole entries above them). The final segments describe the end of the
// run, which the cut trace does not reach, so no initial state is rebuilt.
func salvage(dec *pickle.Decoder, opt Options, size int, cause error) *Snapshot {
	doc, stack := dec.Partial()
	at := -1
	for i := 0; i+1 < len(stack); i++ {
		if s, ok := doc.Str(stack[i]); ok && s == "device_traces" && doc.Kind(stack[i+1]) == pickle.KindList {
			at = i + 1
			break
		}
	}
	if at < 0 {
		return nil
	}
	var devs [][]pickle.Value
	for _, l := range doc.Slice(stack[at]) {
		if doc.Kind(l) == pickle.KindList {
			devs = append(devs, doc.Slice(l))
		}
	}
	complete := func(v pickle.Value) bool {
		if doc.Kind(v) != pickle.KindDict {
			return false
		}
		_, ok := doc.Get(v, "action")
		return ok
	}
	for _, v := range stack[at+1:] {
		switch {
		case doc.Kind(v) == pickle.KindList:
			devs = append(devs, slices.Clone(doc.Slice(v)))
		case complete(v) && len(devs) > 0:
			devs[len(devs)-1] = append(devs[len(devs)-1], v)
		}
	}
	n := 0
	for _, d := range devs {
		n += len(d)
	}
	if n == 0 {
		return nil
	}
	c := &converter{opt: opt, snap: &Snapshot{doc: doc, stacks: &stackTable{}}, doc: doc, traces: noFrames, salvaged: devs}
	c.snap.ecs.dir = opt.SpillDir
	c.snap.summary.PickleBytes = int64(size)
	c.note("the snapshot is cut short (%v): only the %d trace entries before the cut are kept, and the allocator state at the first entry is unknown", cause, n)
	top := &pickle.Dict{}
	if err := c.convert(top); err != nil {
		c.snap.Close()
		return nil
	}
	return c.snap
}

// Emit writes the snapshot's events to sink, in order. It may be called
// again, but not concurrently on one Snapshot.
func (s *Snapshot) Emit(sink trace.Sink, progress func(string, int64, int64)) error {
	return s.emit(sink, progress, false)
}

// emit is Emit; closing is set when the sink is given nothing after the
// events but its end (see eventWriter.closing).
func (s *Snapshot) emit(sink trace.Sink, progress func(string, int64, int64), closing bool) error {
	if ps, ok := s.poolSink(sink); ok {
		return ps.emit(s, progress)
	}
	w := &eventWriter{s: s, sink: sink, progress: progress, total: int64(s.summary.Events), closing: closing}
	w.batcher, _ = sink.(batcher)
	if doc := s.doc; doc != nil {
		w.strIDs = make([]uint32, doc.NumStrings())
	}
	if f, ok := sink.(flusher); ok && (len(s.texts) > 1 || len(s.stacks.stacks) > 0) {
		// The texts and stacks are defined first, in a table of their
		// own: the events with one then go to the sink with the others,
		// in ranges compressed on every core. (Defined where each was
		// first used, they cut the ranges, and the writer wrote every
		// event after one up to its chunk's end itself: train_s1's 240
		// annotations sent all its 103,000 events through that path, 4-5
		// ms of its import on the H200 host against 1 ms for
		// baseline_s1's; with call stacks, every event went so.)
		w.texts = make([]trace.StringID, len(s.texts))
		for i := 1; i < len(s.texts); i++ {
			w.texts[i] = sink.String(s.texts[i])
		}
		w.stackIDs = make([]trace.StackID, len(s.stacks.stacks))
		for id := range s.stacks.stacks {
			w.stackIDs[id] = w.stack(pickle.Value(id))
		}
		if err := f.Flush(); err != nil {
			return err
		}
	}
	return s.each(w)
}

// flusher is a sink that can end its chunk in progress (trace.Writer).
type flusher interface{ Flush() error }

// eventWriter writes events to a sink with their stacks and texts (or,
// with collect set, keeps them: for tests).
type eventWriter struct {
	s        *Snapshot
	sink     trace.Sink
	progress func(string, int64, int64)
	total    int64
	i        int
	frames   []trace.Frame
	strIDs   []uint32         // doc string index -> sink StringID + 1
	texts    []trace.StringID // s.texts index -> sink StringID, when defined first (see Emit)
	stackIDs []trace.StackID  // stack id -> sink StackID, when defined first (see Emit)

	collect bool
	out     []event

	batcher batcher // the sink, when it takes events in batches
	batch   []trace.Event
	bare    bool // the events putBlock is given are all bare

	// queue set (by eachOf, for a device in memory), the events without
	// a stack or text that put and putBlock are given wait in queued,
	// runs of entries and single events, to go to the sink together
	// (flushQueue): a device with many empty_cache() events merged in
	// was written run by run, mostly on this goroutine.
	queue   bool
	queued  []queuedRun
	nQueued int

	// closing is set when nothing is given to the sink after the
	// events but its end (ImportFile closes it).
	closing bool
}

// plain reports whether e goes to the sink in batches: it has no stack
// or one defined first, and no text or one defined first (see Emit).
func (w *eventWriter) plain(e *event) bool {
	return (e.frames == noFrames || w.stackIDs != nil) && (e.text == 0 || w.texts != nil)
}

// allPlain reports whether every event of b is plain.
func (w *eventWriter) allPlain(b []event) bool {
	for i := range b {
		if !w.plain(&b[i]) {
			return false
		}
	}
	return true
}

// event returns the sink's event of e, with its stack and text when they
// were defined first (see Emit): all of a plain event.
func (w *eventWriter) event(e *event) trace.Event {
	ev := e.Event()
	if e.text != 0 && w.texts != nil {
		ev.Text = w.texts[e.text]
	}
	if e.frames != noFrames && w.stackIDs != nil {
		ev.Stack = w.stackIDs[e.frames]
	}
	return ev
}

// queuedRun is a run of events putBlock was given (in memory until
// flushQueue), or, evs nil, one event put was given.
type queuedRun struct {
	evs []event
	one event
}

// writeBatch is the events putBlock gives the sink at a time.
const writeBatch = 1024

// batcher is a sink that takes events in batches and ranges (trace.Writer).
type batcher interface {
	WriteEvents(evs []trace.Event) error
	WriteRange(n int, fill func(dst []trace.Event, i int)) error
}

// rangeEnder is a batcher that can end its chunk in progress with a range
// (trace.Writer).
type rangeEnder interface {
	WriteRangeEnd(n int, fill func(dst []trace.Event, i int)) error
}

// putBlock writes the events b, in order: in batches when the sink takes
// them (an event with a stack or a text goes alone, through put). A block
// of bare events goes to the sink as one range (flushQueue), and while
// queue is set waits there for the next ones.
func (w *eventWriter) putBlock(b []event) error {
	if w.batcher == nil || w.collect {
		for i := range b {
			if err := w.put(&b[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if w.bare || w.allPlain(b) {
		w.queued = append(w.queued, queuedRun{evs: b})
		w.nQueued += len(b)
		if w.queue {
			return nil
		}
		return w.flushQueue()
	}
	if err := w.flushQueue(); err != nil {
		return err
	}
	batch := w.batch[:0]
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := w.batcher.WriteEvents(batch); err != nil {
			return fmt.Errorf("events %d to %d: %w", w.i, w.i+len(batch)-1, err)
		}
		w.wrote(len(batch))
		batch = batch[:0]
		return nil
	}
	for i := range b {
		e := &b[i]
		if !w.plain(e) {
			if err := flush(); err != nil {
				return err
			}
			if err := w.put(e); err != nil {
				return err
			}
			continue
		}
		batch = append(batch, w.event(e))
		if len(batch) == writeBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	err := flush()
	w.batch = batch
	return err
}

// str returns the sink's ID of the doc's string v.
func (w *eventWriter) str(v pickle.Value) trace.StringID {
	doc := w.s.doc
	id, ok := doc.StrID(v)
	if !ok {
		return trace.NoString
	}
	if sid := w.strIDs[id]; sid != 0 {
		return trace.StringID(sid - 1)
	}
	t, _ := doc.Str(v)
	sid := w.sink.String(t)
	w.strIDs[id] = uint32(sid) + 1
	return sid
}

// flushQueue writes the events queued, in order, as one range.
func (w *eventWriter) flushQueue() error { return w.flushQueueEnd(false) }

// flushQueueEnd is flushQueue; with end set, the events queued are the
// last the sink is given before it is closed, and when it can (a
// trace.Writer), it ends its chunk in progress with them (see
// trace.Writer.WriteRangeEnd).
func (w *eventWriter) flushQueueEnd(end bool) error {
	q, n := w.queued, w.nQueued
	if len(q) == 0 {
		return nil
	}
	w.queued, w.nQueued = q[:0], 0
	write := w.batcher.WriteRange
	if e, ok := w.batcher.(rangeEnder); ok && end {
		write = e.WriteRangeEnd
	}
	starts := make([]int, len(q)) // each run's first event in the range
	at := 0
	for r := range q {
		starts[r] = at
		at += max(len(q[r].evs), 1)
	}
	err := write(n, func(dst []trace.Event, i int) {
		r, _ := slices.BinarySearch(starts, i+1)
		r--
		for j := 0; j < len(dst); r++ {
			x := &q[r]
			if x.evs == nil {
				dst[j] = w.event(&x.one)
				j++
				continue
			}
			off := i + j - starts[r]
			m := min(len(x.evs)-off, len(dst)-j)
			for t := range m {
				dst[j+t] = w.event(&x.evs[off+t])
			}
			j += m
		}
	})
	if err != nil {
		return fmt.Errorf("events %d to %d: %w", w.i, w.i+n-1, err)
	}
	w.wrote(n)
	return nil
}

// wrote counts n events given to the sink, and reports the progress.
func (w *eventWriter) wrote(n int) {
	if w.progress != nil && (w.i+n)>>18 != w.i>>18 {
		w.progress("write", int64(w.i+n), w.total)
	}
	w.i += n
}

// put writes e, the next event.
func (w *eventWriter) put(e *event) error {
	if w.collect {
		w.out = append(w.out, *e)
		return nil
	}
	if w.queue && w.batcher != nil {
		if w.plain(e) {
			w.queued = append(w.queued, queuedRun{one: *e})
			w.nQueued++
			return nil
		}
		if err := w.flushQueue(); err != nil {
			return err
		}
	}
	ev := w.event(e) // its stack and text when defined first (see Emit)
	if e.frames != noFrames && w.stackIDs == nil {
		ev.Stack = w.stack(e.frames)
	}
	if e.text != 0 && w.texts == nil {
		ev.Text = w.sink.String(w.s.texts[e.text])
	}
	if err := w.sink.WriteEvent(ev); err != nil {
		return fmt.Errorf("event %d: %w", w.i, err)
	}
	if w.progress != nil && w.i&(1<<18-1) == 0 {
		w.progress("write", int64(w.i), w.total)
	}
	w.i++
	return nil
}

// stack returns the sink's stack of the snapshot's stack id, defining it
// and its strings (NoStack for a stack of no frames).
func (w *eventWriter) stack(id pickle.Value) trace.StackID {
	w.frames = w.frames[:0]
	for _, f := range w.s.stacks.stacks[id] {
		fr := trace.Frame{Line: f.line}
		// The strings go to the sink in the order of the frame's keys.
		if f.nameFirst && f.name != noFrames {
			fr.Func = w.str(f.name)
		}
		if f.file != noFrames {
			fr.File = w.str(f.file)
		}
		if !f.nameFirst && f.name != noFrames {
			fr.Func = w.str(f.name)
		}
		w.frames = append(w.frames, fr)
	}
	if len(w.frames) == 0 {
		return trace.NoStack
	}
	return w.sink.Stack(w.frames)
}

// seqReader reads a device's event sequence (see devSeq).
type seqReader struct {
	s      *Snapshot
	seq    *devSeq
	raw    *cursor
	ecs    *cursor
	ec     *event // the next inferred empty_cache(), nil when none
	t      int64  // the time of the latest entry
	n      int    // entries read
	head   event  // the next entry or empty_cache()
	ok     bool   // head is set
	filled bool   // head and ok are up to date
	mi     int    // the next marker
}

func (s *Snapshot) newSeqReader(seq *devSeq) *seqReader {
	r := &seqReader{s: s, seq: seq, raw: newCursor(s.raw, seq.from, seq.to), ecs: newCursor(&s.ecs, seq.ecFrom, seq.ecTo)}
	r.ec = r.ecs.next()
	return r
}

// entry returns the device's next entry or inferred empty_cache().
func (r *seqReader) entry() (event, bool) {
	if r.ec != nil && int(r.ec.Addr) == r.n {
		e := *r.ec
		e.Addr = 0
		r.ec = r.ecs.next()
		return e, true
	}
	for {
		p := r.raw.next()
		if p == nil {
			return event{}, false
		}
		if e := *p; r.seq.conv || r.s.entry(&e, r.seq.dev, &r.t) {
			r.n++
			return e, true
		}
	}
}

// peek returns the device's next event without taking it; false at the end.
func (r *seqReader) peek() (*event, bool) {
	if !r.filled {
		r.head, r.ok = r.entry()
		r.filled = true
	}
	// An annotation goes before the entries of a later time only.
	if ms := r.seq.markers; r.mi < len(ms) && (!r.ok || ms[r.mi].TimeNS < r.head.TimeNS) {
		return &ms[r.mi], true
	}
	return &r.head, r.ok
}

// take drops the event peek returned.
func (r *seqReader) take() {
	if ms := r.seq.markers; r.mi < len(ms) && (!r.ok || ms[r.mi].TimeNS < r.head.TimeNS) {
		r.mi++
		return
	}
	r.filled = false
}

// err returns the error that ended the reading, if any.
func (r *seqReader) err() error {
	if r.raw.err != nil {
		return r.raw.err
	}
	return r.ecs.err
}

// eachOf writes the events of one device's sequence, in order: what
// seqReader gives, without its per-event calls. With last set, they are
// the last events the sink is given (see flushQueueEnd).
func (s *Snapshot) eachOf(q *devSeq, w *eventWriter, last bool) error {
	ecs := newCursor(&s.ecs, q.ecFrom, q.ecTo)
	ec := ecs.next()
	ms := q.markers
	// marks writes the annotations of a time before t.
	marks := func(t int64) error {
		for len(ms) > 0 && ms[0].TimeNS < t {
			if err := w.put(&ms[0]); err != nil {
				return err
			}
			ms = ms[1:]
		}
		return nil
	}
	// put writes x after the annotations of an earlier time.
	put := func(x *event) error {
		if err := marks(x.TimeNS); err != nil {
			return err
		}
		return w.put(x)
	}
	// flushECs writes the empty_cache() events that go before entry k.
	var x event
	flushECs := func(k int) error {
		for ec != nil && int(ec.Addr) == k {
			x = *ec
			x.Addr = 0
			if err := put(&x); err != nil {
				return err
			}
			ec = ecs.next()
		}
		return nil
	}
	var t int64
	k := 0
	if q.conv && !mergeOneByOne {
		w.bare, w.queue = q.bare, true
		defer func() { w.bare, w.queue = false, false }()
		// Converted in memory (the usual case): the entries between two
		// events merged in go to putBlock together (one by one, they kept
		// the writer's compressors waiting on this goroutine), and wait
		// there with the empty_cache() events until an annotation or the
		// end, to go to the writer as one range.
		err := s.raw.blocks(q.from, q.to, false, func(_ int, b []event) error {
			for len(b) > 0 {
				if err := flushECs(k); err != nil {
					return err
				}
				if err := marks(b[0].TimeNS); err != nil {
					return err
				}
				n := len(b) // the run: up to the next event merged in
				if ec != nil && int(ec.Addr) > k {
					n = min(n, int(ec.Addr)-k)
				}
				if len(ms) > 0 {
					for j := 1; j < n; j++ {
						if ms[0].TimeNS < b[j].TimeNS {
							n = j
						}
					}
				}
				if err := w.putBlock(b[:n]); err != nil {
					return err
				}
				b, k = b[n:], k+n
			}
			return nil
		})
		if err != nil {
			return err
		}
	} else if err := s.raw.blocks(q.from, q.to, false, func(_ int, b []event) error {
		for i := range b {
			// Converted where it is: b is a copy when not converted
			// (spilled).
			e := &b[i]
			if !q.conv && !s.entry(e, q.dev, &t) {
				continue
			}
			if ec != nil {
				if err := flushECs(k); err != nil {
					return err
				}
			}
			k++
			var err error
			if len(ms) == 0 {
				err = w.put(e)
			} else {
				err = put(e)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := flushECs(k); err != nil {
		return err
	}
	for i := range ms {
		if err := w.put(&ms[i]); err != nil {
			return err
		}
	}
	if err := w.flushQueueEnd(last); err != nil {
		return err
	}
	return ecs.err
}

// mergeOneByOne makes eachOf merge events in with each entry, as it
// does for entries not converted in memory (tests: the reference).
var mergeOneByOne = false

// each writes the events, in order: the devices' sequences merged by
// time, each keeping its order, ties going to the lower device.
func (s *Snapshot) each(w *eventWriter) error {
	rs := make([]*seqReader, 0, len(s.seqs))
	for i := range s.seqs {
		q := &s.seqs[i]
		if q.to > q.from || q.ecTo > q.ecFrom || len(q.markers) > 0 {
			rs = append(rs, s.newSeqReader(q))
		}
	}
	if len(rs) == 1 {
		return s.eachOf(rs[0].seq, w, w.closing)
	}
	for {
		var best *seqReader
		var be *event
		for _, r := range rs {
			if e, ok := r.peek(); ok && (best == nil || e.TimeNS < be.TimeNS) {
				best, be = r, e
			}
		}
		if best == nil {
			break
		}
		if err := w.put(be); err != nil {
			return err
		}
		best.take()
	}
	for _, r := range rs {
		if err := r.err(); err != nil {
			return err
		}
	}
	return nil
}

// Import reads a snapshot from r and writes its events to sink. The sink's
// header must have been made from the snapshot's (see Load and Header);
// Import is Load followed by Emit for callers that only need the events.
func Import(r io.Reader, name string, sink trace.Sink, opt Options) (*Summary, error) {
	s, err := Load(r, name, opt)
	if s == nil {
		return nil, err
	}
	defer s.Close()
	if err := s.Emit(sink, opt.Progress); err != nil {
		return &s.summary, &Error{name, err}
	}
	return &s.summary, err
}

// ImportFile imports the snapshot file in into a trace file out. The trace
// is written to a temporary file renamed into place at the end, so a failed
// write never leaves a partial trace at out. A snapshot cut short still
// gives a trace of the entries before the cut (its header says so) when
// there are any: ImportFile then returns the summary, with Output set, and
// the error.
func ImportFile(in, out string, opt Options) (*Summary, error) {
	f, err := os.Open(in)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, _ := f.Stat()
	// The trace writer's buffers and zstd encoders are readied on another
	// core while the snapshot is decoded (they are fresh memory:
	// baseline_s1 faulted about 2,200 pages of them while writing), from
	// a third of the way through the decode, for the entries expected.
	// One encoder per compressing goroutine (see WriterOptions), up to
	// maxPrepared.
	var prepareOnce sync.Once
	prepare := func(events int) {
		prepareOnce.Do(func() {
			n := min(compressors(events), maxPrepared)
			trace.PrepareWriter(n, min(events, chunkEvents(events)), level(events)...)
		})
	}
	opt.prepare = prepare
	if opt.SpillDir == "" {
		opt.SpillDir = filepath.Dir(out)
	}
	var s *Snapshot
	var loadErr error
	if data, unmap, ok := mapFile(f); ok {
		s, loadErr = loadMapped(data, in, opt)
		// Nothing decoded refers to the input's bytes. Unmapped on another
		// goroutine, as the trace is written: it took 0.2-0.5 ms of
		// baseline_s1's import on the H200 host.
		go unmap()
	} else {
		s, loadErr = Load(f, in, opt)
	}
	if s == nil {
		return nil, loadErr
	}
	defer s.Close()
	prepare(s.summary.Events) // if the decode did not
	if st != nil {
		s.summary.InputBytes = st.Size()
		// No collection is forced here: the writer's memory was prepared
		// during the decode (above), so the decoder's garbage has nothing
		// to serve before the trace is written. (Forcing one above 32 MB,
		// which paid when the writer faulted in fresh memory, now cost a
		// 1M-entry snapshot 40-70 ms and kv_decode_s1 0-25 ms; peak RSS is
		// the same at 10M entries, 16 MiB lower at 1M.)
	}
	tmp := filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".tmp")
	w, err := trace.Create(tmp, s.Header(), s.WriterOptions()...)
	if err != nil {
		return nil, err
	}
	if err := s.emit(w, opt.Progress, true); err != nil {
		w.Close()
		os.Remove(tmp)
		return nil, &Error{out, err}
	}
	if err := w.Close(); err != nil {
		os.Remove(tmp)
		return nil, &Error{out, err}
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	s.summary.Output = out
	return &s.summary, loadErr
}

// ---- value helpers ----

func getString(d *pickle.Dict, key string) (string, bool) {
	v, ok := d.Get(key)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case uint64:
		return int64(x), true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case float64:
		return int64(x), true
	}
	return 0, false
}

func getInt(d *pickle.Dict, key string) (int64, bool) {
	v, ok := d.Get(key)
	if !ok {
		return 0, false
	}
	return toInt(v)
}

func asItems(v any) []any {
	switch x := v.(type) {
	case *pickle.List:
		return x.Items
	case pickle.Tuple:
		return x
	}
	return nil
}

// pyString renders a settings value as Python's str() would.
func pyString(v any, depth int) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eEn") {
			s += ".0"
		}
		return s
	case string:
		return x
	}
	if depth > 8 {
		return "..."
	}
	switch x := v.(type) {
	case *pickle.Dict:
		parts := make([]string, 0, x.Len())
		for _, p := range sortedPairs(x) {
			parts = append(parts, strconv.Quote(p.Key)+":"+pyJSON(p.Value, depth+1))
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	items := asItems(v)
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = pyString(it, depth+1)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func pyJSON(v any, depth int) string {
	switch v.(type) {
	case string:
		b, _ := json.Marshal(v)
		return string(b)
	case nil:
		return "null"
	case bool:
		if v.(bool) {
			return "true"
		}
		return "false"
	}
	return pyString(v, depth)
}

// sortedPairs orders a dict's pairs numerically when every key is a number,
// else by key.
func sortedPairs(d *pickle.Dict) []pickle.Pair {
	ps := slices.Clone(d.Pairs)
	numeric := true
	for _, p := range ps {
		if _, err := strconv.ParseFloat(p.Key, 64); err != nil {
			numeric = false
			break
		}
	}
	sort.SliceStable(ps, func(i, j int) bool {
		if numeric {
			a, _ := strconv.ParseFloat(ps[i].Key, 64)
			b, _ := strconv.ParseFloat(ps[j].Key, 64)
			return a < b
		}
		return ps[i].Key < ps[j].Key
	})
	return ps
}

// ---- rounding (PyTorch's round_size, for blocks the snapshot lost) ----

const (
	minBlockSize = 512
	smallSize    = 1 << 20
	smallBuffer  = 2 << 20
)

type settings struct {
	divisions    [16]uint64
	maxSplit     uint64 // MaxUint64 when unlimited
	gcThreshold  float64
	expandable   bool
	largeSegment uint64
}

func (s *settings) roundSize(n uint64) uint64 {
	if n < minBlockSize {
		return minBlockSize
	}
	logSize := 63 - bits.LeadingZeros64(n)
	idx := max(logSize-20, 0)
	idx = min(idx, 15)
	d := s.divisions[idx]
	if d > 1 && n > minBlockSize*d {
		if n&(n-1) == 0 {
			return n
		}
		f := uint64(1) << logSize
		step := f >> (63 - bits.LeadingZeros64(d))
		if step == 0 {
			return 2 * f
		}
		return (n + step - 1) / step * step
	}
	return (n + minBlockSize - 1) / minBlockSize * minBlockSize
}

// ---- conversion ----

type converter struct {
	// salvaged holds, for a cut-off pickle, the trace entries of each
	// device decoded before the cut.
	salvaged [][]pickle.Value
	doc      *pickle.Doc
	stream   *streamer    // the entries' events, when streamed
	traces   pickle.Value // device_traces, or noFrames when absent
	segs     pickle.Value // the final segments, when hasSegs
	hasSegs  bool
	opt      Options
	snap     *Snapshot
	set      settings
	approx   []string
}

func (c *converter) note(format string, args ...any) {
	c.approx = append(c.approx, fmt.Sprintf(format, args...))
}

var actionKinds = map[string]trace.Kind{
	"alloc":          trace.KindAlloc,
	"free_requested": trace.KindFreeRequested,
	"free_completed": trace.KindFreeCompleted,
	"segment_alloc":  trace.KindSegmentAlloc,
	"segment_free":   trace.KindSegmentFree,
	"segment_map":    trace.KindSegmentMap,
	"segment_unmap":  trace.KindSegmentUnmap,
	"oom":            trace.KindOOM,
	"snapshot":       trace.KindSnapshot,
	"annotate":       trace.KindMarker,
}

func (c *converter) convert(top *pickle.Dict) error {
	h := &c.snap.header
	h.Producer = trace.ProducerPyTorch
	h.MemoryFraction = c.opt.MemoryFraction
	h.Merge(c.opt.Meta)
	sum := &c.snap.summary
	sum.Actions = map[string]map[string]int{}
	sum.Kinds = map[string]int{}
	c.set.maxSplit = math.MaxUint64
	if v, ok := top.Get("allocator_settings"); ok {
		if d, ok := v.(*pickle.Dict); ok {
			c.settings(d)
		}
	} else {
		c.note("the snapshot has no allocator_settings (older PyTorch): the replay uses default settings")
	}
	if c.traces == noFrames && c.salvaged == nil {
		return errors.New("not a memory snapshot: no device_traces key")
	}
	var err error
	if c.stream != nil {
		err = c.streamEntries()
	} else {
		err = c.entries()
	}
	if err != nil {
		return err
	}
	nTrace := len(c.snap.seqs)

	var states map[int]*devState
	if c.salvaged == nil {
		states = map[int]*devState{}
		if c.hasSegs {
			if states, err = finalStates(c.doc, c.segs); err != nil {
				return err
			}
			c.snap.pools = finalPools(states)
		}
		for dev := range nTrace {
			if states[dev] == nil {
				states[dev] = newDevState()
			}
		}
	}
	// Backwards: each device's state undone to its first entry. A device
	// in memory of parallelMin entries or more is undone and converted
	// (see forward) at once, on several goroutines; the others are
	// converted once the initial state is known.
	conv := make([]convResult, len(c.snap.seqs))
	for i := range c.snap.seqs {
		q := &c.snap.seqs[i]
		var ds *devState
		if states != nil {
			ds = states[i]
		}
		if k := c.workers(q.to - q.from); k > 1 && !c.snap.raw.spilled() && q.to-q.from >= parallelMin {
			conv[i] = c.forwardUndo(c.snap.raw.mem[q.from:q.to], q.dev, k, true, ds)
			continue
		}
		if ds == nil {
			continue
		}
		err := c.snap.raw.blocks(q.from, q.to, true, func(_ int, b []event) error {
			ds.undo(b)
			return nil
		})
		if err != nil {
			return err
		}
	}
	unknownAt := len(c.approx) // the note on unknown actions goes here
	var init *trace.InitialState
	if c.salvaged == nil {
		init = c.initialState(states)
	}
	if init != nil && len(init.Segments) > 0 {
		h.Initial = init
		sum.MidRun = true
		for _, s := range init.Segments {
			sum.InitialSegs++
			sum.InitialBlks += len(s.Blocks)
			sum.ReservedInit += s.SizeBytes
		}
	}

	// Forwards: the counts per action, the empty_cache() inference and the
	// summary's figures.
	var st stats
	for i := range c.snap.seqs {
		if err := c.forward(&c.snap.seqs[i], init, &st, &conv[i]); err != nil {
			return err
		}
	}
	if err := c.snap.ecs.finish(); err != nil {
		return err
	}
	if len(sum.UnknownActs) > 0 {
		keys := make([]string, 0, len(sum.UnknownActs))
		for k := range sum.UnknownActs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		note := fmt.Sprintf("trace entries with unknown actions were skipped: %s", strings.Join(keys, ", "))
		c.approx = slices.Insert(c.approx, unknownAt, note)
	}

	// Annotations become markers on their device's sequence.
	markers := map[int][]event{}
	if v, ok := top.Get("external_annotations"); ok {
		for _, it := range asItems(v) {
			ad, ok := it.(*pickle.Dict)
			if !ok {
				continue
			}
			e := event{}
			e.Kind = trace.KindMarker
			e.Marker = trace.MarkerText
			switch st, _ := getString(ad, "stage"); st {
			case "START":
				e.Marker = trace.MarkerBegin
			case "END":
				e.Marker = trace.MarkerEnd
			}
			dev, _ := getInt(ad, "device")
			e.Device = trace.DeviceID(dev)
			t, _ := getInt(ad, "time_us")
			e.TimeNS = t * 1000
			name, _ := getString(ad, "name")
			e.text = c.snap.text(name)
			e.frames = noFrames
			markers[int(dev)] = append(markers[int(dev)], e)
			sum.Markers++
			st.add(&e)
		}
	}
	devs := make([]int, 0, len(markers))
	for dev := range markers {
		devs = append(devs, dev)
	}
	slices.Sort(devs)
	for _, dev := range devs {
		ms := markers[dev]
		sort.SliceStable(ms, func(i, j int) bool { return ms[i].TimeNS < ms[j].TimeNS })
		if dev >= 0 && dev < nTrace {
			c.snap.seqs[dev].markers = ms
		} else {
			c.snap.seqs = append(c.snap.seqs, devSeq{dev: trace.DeviceID(dev), markers: ms})
		}
	}

	c.summarize(&st)
	h.Approximate = c.approx
	sum.Approximate = c.approx
	sum.Header = h
	return nil
}

// convResult is what forwardUndo's conversion of a device's events found.
type convResult struct {
	ok   bool    // converted: no entry to drop, no annotate entry
	segs []int32 // the indices of its segment events
	st   stats   // what the conversion counted
}

// forwardUndo walks a device's events evs, in memory, on k goroutines,
// for forward's conversion (when convert is set) and for undo of the
// device's final state ds (when not nil), at once: k goroutines, each
// making two passes over its part with a barrier between them, where the
// two walks apart took four rounds of goroutines and then two (starting
// k goroutines cost 0.2-0.7 ms on the H200 host before all of them ran).
//
// The conversion converts the events in place, a k-th on each goroutine,
// and counts them (entry, stats.add), the time an entry without one takes
// carried from the parts before. It converts nothing, and res.ok is false,
// when an entry is to be dropped or is an annotation (whose text is made
// in order): forward then converts them all itself.
//
// Undo sorts the entries into k parts, by block (partOf; the segments'
// entries go to part 0), a k-th of them on each goroutine, as indices;
// each part is then undone (undoOne) from its own copy of its blocks'
// final state, and the states are joined: the result is undo's. (Each
// part walking all the entries and skipping the others' took baseline_s1
// about 1.2 ms on 8 cores.)
//
// The walks share the events: undo reads their kind, address, size and
// stream; the conversion writes their time, device, text and set, and a
// snapshot entry's address, which undo does not read.
func (c *converter) forwardUndo(evs []event, dev trace.DeviceID, k int, convert bool, ds *devState) (res convResult) {
	type part struct {
		lo, hi int
		timed  bool  // some entry sets its time
		last   int64 // the last time set
		st     stats
		segs   []int32
		undo   *devState
		_      [64]byte // the parts are written side by side
	}
	parts := make([]part, k)
	for i := range parts {
		parts[i].lo, parts[i].hi = len(evs)*i/k, len(evs)*(i+1)/k
	}
	var idx [][]int32 // [r*k+p]: undo part p's entries among part r's
	if ds != nil {
		idx = make([][]int32, k*k)
		for p := range parts {
			parts[p].undo = &devState{}
		}
		parts[0].undo.segs, parts[0].undo.ends = ds.segs, ds.ends
		ds.active.each(func(a uint64, b rblk) { parts[partOf(a, k)].undo.active.put(a, b) })
	}
	// One goroutine per part for both passes, which meet at a barrier:
	// the second needs what the first found in every part. (Two rounds
	// of goroutines cost a second ramp: on the H200 host's 16 cores the
	// goroutines of a round started over 0.4-0.7 ms, each waking an idle
	// core, for baseline_s1's 0.1-0.8 ms of work each.)
	var wg sync.WaitGroup
	var met atomic.Int32
	var converting atomic.Bool // the parts' first pass found nothing to drop
	converting.Store(convert)
	for r := range parts {
		wg.Go(func() {
			p := &parts[r]
			if convert {
				for i := p.lo; i < p.hi; i++ {
					e := &evs[i]
					if e.set&setTimeOK != 0 {
						p.timed, p.last = true, e.TimeNS
					}
					if e.set&setAction == 0 || e.Kind == trace.KindInvalid || e.Kind == trace.KindMarker {
						converting.Store(false)
						break
					}
				}
			}
			if ds != nil {
				lists := idx[r*k : (r+1)*k]
				n := p.hi - p.lo
				for q := range lists {
					lists[q] = make([]int32, 0, n/k+n/(4*k)+16)
				}
				for i := p.lo; i < p.hi; i++ {
					switch e := &evs[i]; {
					case e.Kind >= trace.KindAlloc && e.Kind <= trace.KindFreeCompleted:
						q := partOf(e.Addr, k)
						lists[q] = append(lists[q], int32(i))
					case e.Kind >= trace.KindSegmentAlloc && e.Kind <= trace.KindSegmentUnmap:
						lists[0] = append(lists[0], int32(i))
					}
				}
			}
			// The barrier: the goroutines are running, so they wait
			// yielding, not blocked (a blocked one's core would idle and
			// be woken again).
			met.Add(1)
			for met.Load() < int32(k) {
				runtime.Gosched()
			}
			if converting.Load() {
				// forward's time before the part's first entry: the last
				// set before it.
				var t int64
				for i := r - 1; i >= 0; i-- {
					if parts[i].timed {
						t = parts[i].last
						break
					}
				}
				var st stats
				var segs []int32
				for i := p.lo; i < p.hi; i++ {
					e := &evs[i]
					c.snap.entry(e, dev, &t)
					st.add(e)
					if e.Kind >= trace.KindSegmentAlloc && e.Kind <= trace.KindSegmentUnmap {
						segs = append(segs, int32(i))
					}
				}
				p.st, p.segs = st, segs
			}
			if ds != nil {
				for q := k - 1; q >= 0; q-- {
					l := idx[q*k+r]
					for j := len(l) - 1; j >= 0; j-- {
						p.undo.undoOne(&evs[l[j]])
					}
				}
			}
		})
	}
	wg.Wait()
	convert = converting.Load()
	if ds != nil {
		ds.active = blkMap{}
		ds.bad = 0
		for i := range parts {
			parts[i].undo.active.each(func(a uint64, b rblk) { ds.active.put(a, b) })
			ds.bad += parts[i].undo.bad
		}
		ds.segs, ds.ends = parts[0].undo.segs, parts[0].undo.ends
	}
	if convert {
		res.ok = true
		for i := range parts {
			res.st.merge(&parts[i].st)
			res.segs = append(res.segs, parts[i].segs...)
		}
	}
	return res
}

// inferParallel is the empty_cache() inference of forward over a
// device's events evs, converted by forwardUndo, which found its
// segment events at segs: only they, and the event after a burst of
// releases, which ends it, change the inference's state.
func (ec *ecInfer) inferParallel(evs []event, segs []int32) {
	next := 0 // the events before it are taken
	for _, i := range segs {
		if ec.inBurst && next < int(i) {
			ec.n = next
			ec.add(&evs[next])
		}
		ec.n = int(i)
		ec.add(&evs[i])
		next = int(i) + 1
	}
	if ec.inBurst && next < len(evs) {
		ec.n = next
		ec.add(&evs[next])
	}
	ec.n = len(evs)
}

// forward reads a device's entries in order, converted: it counts them
// by action, infers the empty_cache() calls (unless told not to) and adds
// the events to st. Entries in memory are converted in place (the ones
// skipped dropped), so that writing them reads them as they are; those
// forwardUndo converted already (conv.ok) are only counted and inferred.
func (c *converter) forward(seq *devSeq, init *trace.InitialState, st *stats, conv *convResult) error {
	sum := &c.snap.summary
	var ec *ecInfer
	if !c.opt.NoInferEmptyCache {
		ec = c.newECInfer(seq.dev, init)
		ec.st = st
	}
	counts := map[string]int{}
	kinds := st.kinds // the device's kinds are those added from here
	seq.ecFrom = c.snap.ecs.Len()
	raw := c.snap.raw
	inPlace := !raw.spilled()
	w := seq.from
	var t int64
	stacks := st.stacks
	if conv.ok {
		// Converted in place by forwardUndo, none dropped, no annotation.
		st.merge(&conv.st)
		if ec != nil {
			ec.inferParallel(raw.mem[seq.from:seq.to], conv.segs)
		}
		seq.bare = st.stacks == stacks
		w = seq.to
		goto done
	}
	{
		err := raw.blocks(seq.from, seq.to, false, func(lo int, b []event) error {
			for i := range b {
				// Converted where it is: b is the log itself in memory, a
				// copy when spilled.
				e := &b[i]
				if !c.snap.entry(e, seq.dev, &t) {
					name := "(none)"
					if e.set&setAction != 0 {
						name = c.snap.unknown[uint32(lo+i)]
					}
					counts[name]++
					if sum.UnknownActs == nil {
						sum.UnknownActs = map[string]int{}
					}
					sum.UnknownActs[name]++
					continue
				}
				st.add(e)
				if ec != nil {
					if ec.inBurst || e.Kind >= trace.KindSegmentAlloc && e.Kind <= trace.KindSegmentUnmap {
						ec.add(e)
					} else {
						ec.n++ // (what add does for the others)
					}
				}
				if inPlace {
					if w != lo+i {
						b[w-lo] = *e
					}
					w++
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	seq.bare = inPlace && st.stacks == stacks && st.kinds[trace.KindMarker] == kinds[trace.KindMarker]
done:
	if inPlace {
		seq.to, seq.conv = w, true
	}
	if ec != nil {
		ec.finish()
	}
	seq.ecTo = c.snap.ecs.Len()
	for name, k := range actionKinds { // (empty_cache is not an action)
		if n := st.kinds[k] - kinds[k]; n > 0 {
			counts[name] += n
		}
	}
	sum.Actions[strconv.Itoa(int(seq.dev))] = counts
	return nil
}

func (c *converter) settings(d *pickle.Dict) {
	h := &c.snap.header
	h.AllocSettings = map[string]string{}
	for _, p := range d.Pairs {
		switch p.Key {
		case "PYTORCH_CUDA_ALLOC_CONF":
			h.AllocConf, _ = p.Value.(string)
		case "roundup_power2_divisions":
			if dd, ok := p.Value.(*pickle.Dict); ok {
				for _, q := range dd.Pairs {
					k, err := strconv.ParseUint(q.Key, 10, 64)
					n, ok := toInt(q.Value)
					if err == nil && ok && k > 0 && k&(k-1) == 0 && n >= 0 {
						if idx := bits.TrailingZeros64(k); idx < 16 {
							c.set.divisions[idx] = uint64(n)
						}
					}
				}
			}
		case "max_split_size":
			if n, ok := toInt(p.Value); ok && n > 0 {
				c.set.maxSplit = uint64(n)
			}
		case "garbage_collection_threshold":
			switch x := p.Value.(type) {
			case float64:
				c.set.gcThreshold = x
			default:
				if n, ok := toInt(x); ok {
					c.set.gcThreshold = float64(n)
				}
			}
		case "expandable_segments":
			c.set.expandable, _ = p.Value.(bool)
		case "per_process_memory_fraction":
			if f, ok := p.Value.(float64); ok && f > 0 && f < 1 && h.MemoryFraction == 0 {
				h.MemoryFraction = f
			}
		}
		h.AllocSettings[p.Key] = pyString(p.Value, 0)
	}
}

// stats gathers the summary's figures over the events written, in any
// order.
type stats struct {
	n, stacks   int
	kinds       [trace.NumKinds]int
	devs        map[trace.DeviceID]bool
	streams     map[trace.StreamID]bool
	first, last int64
	lastDev     trace.DeviceID
	lastStream  trace.StreamID
	haveStream  bool
}

// merge adds what o counted, after what st counted.
func (st *stats) merge(o *stats) {
	if o.n == 0 {
		return
	}
	if st.n == 0 {
		st.devs, st.streams, st.first, st.last = map[trace.DeviceID]bool{}, map[trace.StreamID]bool{}, o.first, o.last
	}
	st.n += o.n
	st.stacks += o.stacks
	for k, n := range o.kinds {
		st.kinds[k] += n
	}
	for d := range o.devs {
		st.devs[d] = true
	}
	for s := range o.streams {
		st.streams[s] = true
	}
	st.first, st.last = min(st.first, o.first), max(st.last, o.last)
	st.lastDev, st.lastStream, st.haveStream = o.lastDev, o.lastStream, o.haveStream
}

func (st *stats) add(e *event) {
	if st.n == 0 {
		st.devs = map[trace.DeviceID]bool{e.Device: true}
		st.streams = map[trace.StreamID]bool{}
		st.lastDev, st.first = e.Device, e.TimeNS
	}
	st.n++
	if int(e.Kind) < len(st.kinds) {
		st.kinds[e.Kind]++
	}
	if e.Device != st.lastDev {
		st.devs[e.Device] = true
		st.lastDev = e.Device
	}
	if e.Kind != trace.KindMarker && e.Kind != trace.KindEmptyCache && e.Kind != trace.KindSnapshot && e.Kind != trace.KindOOM &&
		(!st.haveStream || e.Stream != st.lastStream) {
		st.streams[e.Stream] = true
		st.lastStream, st.haveStream = e.Stream, true
	}
	if e.frames != noFrames {
		st.stacks++
	}
	st.first = min(st.first, e.TimeNS)
	st.last = max(st.last, e.TimeNS)
}

func (c *converter) summarize(st *stats) {
	sum := &c.snap.summary
	sum.Events = st.n
	sum.Stacks = st.stacks
	sum.FirstNS, sum.LastNS = st.first, st.last
	for k, n := range st.kinds {
		if n > 0 {
			sum.Kinds[trace.Kind(k).String()] = n
		}
	}
	if h := &c.snap.header; h.Created.IsZero() && sum.FirstNS > 0 {
		h.Created = time.Unix(0, sum.FirstNS).UTC() // the snapshot's first entry
	}
	for d := range st.devs {
		sum.Devices = append(sum.Devices, d)
	}
	slices.Sort(sum.Devices)
	for s := range st.streams {
		sum.Streams = append(sum.Streams, s)
	}
	slices.Sort(sum.Streams)
}
