package pytorch

import (
	"errors"
	"fmt"
	"math"
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
)

type converter struct {
	// salvaged holds, for a cut-off pickle, the trace entries of each
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
	ext      bool // the snapshot has a "fragsim" key (extension.go)
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
	sum.capKnown = c.opt.capBytes() > 0
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
	var err error
	switch {
	case c.traces == noFrames && c.salvaged == nil:
		if !c.hasSegs {
			return errors.New("not a memory snapshot: no device_traces key")
		}
		// A state-only snapshot: its segments are the initial state.
		c.snap.raw = &evlog{dir: c.opt.SpillDir}
		err = c.snap.raw.finish()
	case c.stream != nil:
		err = c.streamEntries()
	default:
		err = c.entries()
	}
	if err != nil {
		return err
	}
	nTrace := len(c.snap.seqs)
	var ext *extension
	if v, ok := top.Get("fragsim"); ok && c.salvaged == nil {
		counts := make([]int, nTrace)
		for i := range counts {
			counts[i] = c.snap.seqs[i].to - c.snap.seqs[i].from
		}
		if ext, err = c.readExtension(v, counts); err != nil {
			return err
		}
		// Its events and header stand for what the import would infer.
		c.opt.NoInferEmptyCache, c.ext = true, true
		c.useExtension(ext)
		h.Merge(c.opt.Meta)
	}

	var states map[int]*devState
	if c.salvaged == nil {
		states = map[int]*devState{}
		if c.hasSegs {
			if states, err = finalStates(c.doc, c.segs, c.maxSize()); err != nil {
				return err
			}
			if ext == nil {
				c.snap.pools = finalPools(states)
			}
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
	if ext != nil && ext.header.Initial != nil {
		init = ext.header.Initial
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
	if err := c.noteLongStacks(); err != nil {
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

	if ext != nil {
		c.extEvents(ext, &st, nTrace)
	} else {
		c.annotations(top, &st, nTrace)
	}

	c.summarize(&st)
	sum.StateOnly = c.salvaged == nil && c.snap.raw.Len() == 0 && h.Initial != nil
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
// making two passes over its part with a barrier between them (one
// round of goroutines: starting k of them costs more than a part's work
// on a small trace).
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
// part does not walk all the entries and skip the others': that work
// would grow with k.)
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
	// the second needs what the first found in every part (a second
	// round of goroutines would wake the idle cores again).
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

// stats gathers the summary's figures over the events written, in any
// order.
type stats struct {
	n, stacks   int
	used        []uint64 // bit i: an event has stack i
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
	for len(st.used) < len(o.used) {
		st.used = append(st.used, 0)
	}
	for i, w := range o.used {
		st.used[i] |= w
	}
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
		e.Kind != trace.KindDeviceMem && e.Kind != trace.KindSetFraction && e.Kind != trace.KindPoolRelease &&
		(!st.haveStream || e.Stream != st.lastStream) {
		st.streams[e.Stream] = true
		st.lastStream, st.haveStream = e.Stream, true
	}
	if e.frames != noFrames {
		st.stacks++
		i := int(e.frames) / 64
		for len(st.used) <= i {
			st.used = append(st.used, 0)
		}
		st.used[i] |= 1 << (uint(e.frames) % 64)
	}
	st.first = min(st.first, e.TimeNS)
	st.last = max(st.last, e.TimeNS)
}

func (c *converter) summarize(st *stats) {
	sum := &c.snap.summary
	sum.Events = st.n
	sum.Stacks = st.stacks
	c.snap.stacksUsed = st.used
	if c.snap.stacksUsed == nil {
		c.snap.stacksUsed = []uint64{} // counted: no event has a stack
	}
	sum.FirstNS, sum.LastNS = st.first, st.last
	for k, n := range st.kinds {
		if n > 0 {
			sum.Kinds[trace.Kind(k).String()] = n
		}
	}
	if h := &c.snap.header; h.Created.IsZero() && sum.FirstNS > 0 && !c.ext {
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

// noteLongStacks notes, for each stack longer than a trace holds, the
// first event that has it and the frames dropped (trace.Writer.Stack
// keeps the first trace.MaxStackFrames).
func (c *converter) noteLongStacks() error {
	stacks := c.snap.stacks.stacks
	long := map[pickle.Value]bool{}
	for id, fr := range stacks {
		if len(fr) > trace.MaxStackFrames {
			long[pickle.Value(id)] = true
		}
	}
	for i := range c.snap.seqs {
		if len(long) == 0 {
			break
		}
		q := &c.snap.seqs[i]
		err := c.snap.raw.blocks(q.from, q.to, false, func(lo int, b []event) error {
			for j := range b {
				if f := b[j].frames; long[f] {
					delete(long, f)
					n := len(stacks[f])
					c.note("device %d, event %d (%s at t=%d ns): its stack of %d frames is cut to the first %d, the most a trace holds (%d dropped)",
						q.dev, lo+j-q.from, b[j].Kind, b[j].TimeNS, n, trace.MaxStackFrames, n-trace.MaxStackFrames)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// extEvents puts the events of the "fragsim" key on their device's
// sequence (a new one for a device without trace entries, of the
// nTrace), counted in st.
func (c *converter) extEvents(x *extension, st *stats, nTrace int) {
	for dev, evs := range x.events {
		if len(evs) == 0 {
			continue
		}
		for i := range evs {
			st.add(&evs[i])
			if evs[i].Kind == trace.KindMarker {
				c.snap.summary.Markers++
			}
		}
		if dev < nTrace {
			c.snap.seqs[dev].ext, c.snap.seqs[dev].extPos = evs, x.places[dev]
		} else {
			c.snap.seqs = append(c.snap.seqs, devSeq{dev: trace.DeviceID(dev), ext: evs, extPos: x.places[dev]})
		}
	}
}

// annotations makes the snapshot's external_annotations markers on their
// device's sequence (a new one for a device without trace entries, of
// the nTrace), counted in st.
func (c *converter) annotations(top *pickle.Dict, st *stats, nTrace int) {
	sum := &c.snap.summary
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
}
