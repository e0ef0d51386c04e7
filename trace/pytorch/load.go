package pytorch

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// Load reads and converts a snapshot; name is used in errors. When the
// snapshot is cut short, Load returns the error and, if trace entries were
// decoded before the cut, a Snapshot of them too (its header says so).
func Load(r io.Reader, name string, opt Options) (*Snapshot, error) {
	data, free, z, err := readSnapshot(r, opt)
	if err != nil {
		return nil, &Error{name, err}
	}
	if z != nil {
		return loadStream(z, name, opt)
	}
	return loadData(data, free, name, opt)
}

// loadMapped is Load of a snapshot file mapped into memory at data.
func loadMapped(data []byte, name string, opt Options) (*Snapshot, error) {
	b := opt.budget()
	if int64(len(data)) > b.limit {
		return nil, &Error{name, fmt.Errorf("input exceeds %d bytes", b.limit)}
	}
	if opt.Progress != nil {
		opt.Progress("read", int64(len(data)), -1)
	}
	pk, free, z, err := openPickle(data, b)
	if err != nil {
		return nil, &Error{name, err}
	}
	if z != nil {
		return loadStream(z, name, opt)
	}
	return loadData(pk, free, name, opt)
}

// loadData converts the pickle data, a mapping (a file's, or the memory a
// decompression made: free is then not nil, and called once the decoder
// is done) or memory of the heap, giving the pages of a mapping back as
// the decoder goes.
func loadData(data []byte, free func(), name string, opt Options) (*Snapshot, error) {
	var release func(int)
	if free != nil || opt.mapped {
		release = releaser(data)
	}
	s, err := loadPickleRelease(data, opt, release)
	if free != nil {
		free() // nothing decoded refers to the input's bytes
	}
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
	return loadInput(input{data: data}, opt, release)
}

// loadInput is loadPickleRelease of a pickle in memory or streamed.
func loadInput(in input, opt Options, release func(int)) (*Snapshot, error) {
	s, err := loadPickleIn(in, opt, true, release)
	var se *SpillError
	if err == nil || errors.As(err, &se) {
		return s, err
	}
	return loadPickleIn(in, opt, false, release)
}

// loadPickleIn converts the pickle in, its trace entries streamed to the
// converter when stream is set (see LoadPickle).
func loadPickleIn(in input, opt Options, stream bool, release func(int)) (_ *Snapshot, err error) {
	dec, err := in.decoder()
	if err != nil {
		return nil, err
	}
	dec.Consumed = release
	if opt.Progress != nil {
		dec.Progress = func(done, total int64) { opt.Progress("decode", done, total) }
	}
	var st *streamer
	if stream {
		st = &streamer{conv: conv{doc: dec.Doc(), maxSize: opt.maxSize()}, dec: dec, size: in.size(), prepareAt: math.MaxInt}
		st.log.dir = opt.SpillDir
		defer func() {
			if st.log.err != nil || err != nil {
				st.log.close()
			}
		}()
		if opt.prepare != nil {
			st.prepareAt, st.prepare = int(float64(in.size())*prepareShare), opt.prepare
		}
		dec.StreamEntries("device_traces", st)
		dec.Workers, dec.Tuning = opt.Workers, opt.tune
		if dec.Workers == 0 {
			dec.Workers = runtime.GOMAXPROCS(0)
		}
	}
	doc, err := dec.DecodeDoc()
	err = in.finish(err)
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
			if s := salvage(dec, opt, in.size(), err); s != nil {
				return s, err
			}
		}
		return nil, err
	}
	root := doc.Root()
	if doc.Kind(root) == pickle.KindList {
		// torch.cuda.memory_snapshot(): the segments alone.
		c := &converter{opt: opt, snap: &Snapshot{doc: doc, stacks: &stackTable{}, par: dec.ParallelStats()}, doc: doc, traces: noFrames, stream: st,
			segs: root, hasSegs: true}
		c.snap.ecs.dir = opt.SpillDir
		c.snap.summary.PickleBytes = int64(in.size())
		if err := c.convert(&pickle.Dict{}); err != nil {
			c.snap.Close()
			return nil, err
		}
		return c.snap, nil
	}
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
	c.snap.summary.PickleBytes = int64(in.size())
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
//
// in "-" is standard input.
//
// An input that can be read only once (standard input, a pipe, a FIFO) is
// read as a file is, within the same budget (Options.MaxInputBytes): its
// first bytes are checked (checkHead), then it is copied to a temporary
// file (trace.OpenInput, in Options.SpillDir), mapped and decoded from
// there, never grown in memory.
func ImportFile(in, out string, opt Options) (*Summary, error) {
	if opt.SpillDir == "" {
		opt.SpillDir = outfile.Dir(out) // beside out, or the system's when out is a pipe
	}
	inp, err := trace.OpenInput(in, trace.InputOptions{MaxBytes: opt.budget().limit, Dir: opt.SpillDir, Check: checkHead})
	if err != nil {
		return nil, err
	}
	defer inp.Close()
	f := inp.File()
	st, _ := f.Stat()
	// The trace writer's buffers and zstd encoders are readied on another
	// core while the snapshot is decoded (they are fresh memory, which
	// the writer would otherwise fault in while writing), from
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
	var s *Snapshot
	var loadErr error
	if data, unmap, ok := mapFile(f); ok {
		opt.mapped = true
		s, loadErr = loadMapped(data, in, opt)
		// Nothing decoded refers to the input's bytes: unmapped on another
		// goroutine, as the trace is written.
		go unmap()
	} else {
		s, loadErr = Load(inp, in, opt)
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
		// to serve before the trace is written.
	}
	// The trace goes to a temporary file of its own beside out, renamed
	// over it once whole (see package outfile).
	of, err := outfile.Create(out, in)
	if err != nil {
		return nil, err
	}
	defer of.Abort()
	w, err := trace.NewWriter(of, s.Header(), s.WriterOptions()...)
	if err != nil {
		return nil, &Error{out, err}
	}
	if err := s.emit(w, opt.Progress, true); err != nil {
		w.Close()
		return nil, &Error{out, err}
	}
	if err := w.Close(); err != nil {
		return nil, &Error{out, err}
	}
	if err := of.Commit(); err != nil {
		return nil, err
	}
	s.summary.Output = out
	return &s.summary, loadErr
}
