package report

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// ExportOptions configures WriteMemoryViz and WritePerfetto.
type ExportOptions struct {
	// Policy is the policy replayed for memory_viz ("": the baseline).
	Policy string
	// Policies are the policies compared for Perfetto; nil: the registry's defaults.
	Policies []string
	// Conf is a PYTORCH_CUDA_ALLOC_CONF string; empty: the trace's own settings.
	Conf string
	// Config is the replay configuration (capacity, fraction, ...).
	Config replay.Config
	// Name is the trace's name, for Perfetto's process names.
	Name string
}

// The actions of PyTorch's trace entries, as memory_viz reads them.
var vizActions = [...]string{"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
	"segment_map", "segment_unmap", "oom"}

const (
	vizAlloc = iota
	vizFreeRequested
	vizFreeCompleted
	vizSegmentAlloc
	vizSegmentFree
	vizSegmentMap
	vizSegmentUnmap
	vizOOM
)

// vizEntry is one trace entry of the replay.
type vizEntry struct {
	action     uint8
	dev        trace.DeviceID
	addr, size uint64
	stream     trace.StreamID
	timeNS     int64
	stack      trace.StackID
	deviceFree uint64 // for an oom
}

// vizRecorder collects a replay's calls as PyTorch trace entries. The
// calls made while an event is replayed are stamped with its time and
// device when the observer sees it.
type vizRecorder struct {
	r        *trace.Reader
	entries  []vizEntry
	stamped  int
	probes   []*probe
	capacity uint64
}

func (v *vizRecorder) add(e vizEntry) { v.entries = append(v.entries, e) }

func (v *vizRecorder) hooks() *hooks {
	return &hooks{
		keepFinal: true,
		malloc: func(p *probe, b driver.Block, n uint64, s trace.StreamID) {
			v.add(vizEntry{action: vizAlloc, addr: b.Addr, size: n, stream: s, stack: trace.NoStack})
		},
		oom: func(p *probe, n uint64, s trace.StreamID) {
			v.add(vizEntry{action: vizOOM, size: n, stream: s, stack: trace.NoStack})
		},
		freeReq: func(p *probe, b driver.Block) {
			o := p.origins[b.Addr]
			v.add(vizEntry{action: vizFreeRequested, addr: b.Addr, size: o.requested, stream: o.stream, stack: o.stack})
		},
		freeDone: func(p *probe, b driver.Block) {
			o := p.origins[b.Addr]
			v.add(vizEntry{action: vizFreeCompleted, addr: b.Addr, size: o.requested, stream: o.stream, stack: o.stack})
		},
		device: func(c devCall) {
			a := map[trace.Kind]uint8{trace.KindSegmentAlloc: vizSegmentAlloc, trace.KindSegmentFree: vizSegmentFree,
				trace.KindSegmentMap: vizSegmentMap, trace.KindSegmentUnmap: vizSegmentUnmap}[c.kind]
			v.add(vizEntry{action: a, addr: c.addr, size: c.size, stream: c.strm, stack: trace.NoStack})
		},
	}
}

func (v *vizRecorder) observe(s *replay.Sample) {
	p := unwrapProbe(s.Policy)
	if p != nil {
		p.observed(s.Event.Device)
		if s.Event.Kind == trace.KindAlloc {
			p.noteAlloc(&s.Event)
		}
	}
	for i := v.stamped; i < len(v.entries); i++ {
		e := &v.entries[i]
		e.timeNS, e.dev = s.TimeNS, s.Event.Device
		switch e.action {
		case vizAlloc:
			if s.Event.Kind == trace.KindAlloc {
				e.stack = s.Event.Stack
			}
		case vizOOM:
			if v.capacity > s.ReservedBytes {
				e.deviceFree = v.capacity - s.ReservedBytes
			}
		}
	}
	v.stamped = len(v.entries)
}

// WriteMemoryViz replays the trace under opts.Policy and writes the
// replay as a PyTorch memory snapshot pickle (the dict that
// torch.cuda.memory._dump_snapshot writes): "segments", the policy's
// segments and blocks as the replay ends, and "device_traces", every
// alloc, free and device call of the replay, so that PyTorch's memory_viz
// shows the run as it would have gone under that policy or setting. The
// segment entries add up to the replay's peak reserved.
func WriteMemoryViz(w io.Writer, open analysis.Opener, opts ExportOptions) (*replay.Result, error) {
	r, c, err := open()
	if err != nil {
		return nil, err
	}
	if c != nil {
		defer c.Close()
	}
	policy := opts.Policy
	if policy == "" {
		policy = allocator.BaselineFacts().Name
	}
	h := r.Header()
	f, err := analysis.NewFactory(policy, opts.Conf, h)
	if err != nil {
		return nil, err
	}
	v := &vizRecorder{r: r, capacity: opts.Config.CapacityBytes}
	if v.capacity == 0 && h != nil {
		v.capacity = h.GPUTotalBytes
	}
	cfg := opts.Config
	cfg.Observer, cfg.Progress = v.observe, nil
	hk := v.hooks()
	inspects := true
	res, err := replay.Run(r, probeFactory(f, hk, func(p *probe) {
		v.probes = append(v.probes, p)
		inspects = inspects && p.inspects()
	}), cfg)
	if err != nil && (res == nil || !errors.Is(err, trace.ErrTruncated)) {
		return res, fmt.Errorf("%s: %w", policy, err)
	}
	if !inspects {
		return res, fmt.Errorf("%s cannot list its segments: no snapshot can be written for it", policy)
	}
	conf := opts.Conf
	if conf == "" && h != nil {
		conf = h.AllocConf
	}
	if f, _ := allocator.Lookup(policy); f.TorchConf != "" && !strings.Contains(conf, strings.Split(f.TorchConf, ":")[0]) {
		conf = strings.Trim(conf+","+f.TorchConf, ",")
	}
	if werr := v.write(w, conf, policy); werr != nil {
		return res, werr
	}
	return res, err
}

// write encodes the snapshot dict.
func (v *vizRecorder) write(w io.Writer, conf, policy string) error {
	e := pickle.NewEncoder(w)
	frames := map[trace.StackID][]trace.Frame{}
	writeFrames := func(id trace.StackID) {
		e.BeginList()
		if id != trace.NoStack {
			fr, ok := frames[id]
			if !ok {
				fr = v.r.Stack(id)
				frames[id] = fr
			}
			for _, f := range fr {
				e.BeginDict()
				e.Str("filename")
				e.Str(v.r.String(f.File))
				e.Str("line")
				e.Int(int64(f.Line))
				e.Str("name")
				e.Str(v.r.String(f.Func))
				e.EndDict()
			}
		}
		e.EndList()
	}
	e.BeginDict()

	e.Str("segments")
	e.BeginList()
	var devs trace.DeviceID
	type segOf struct {
		p   *probe
		seg trace.Segment
	}
	var segs []segOf
	for _, p := range v.probes {
		devs = max(devs, p.dev+1)
		for _, s := range p.final {
			segs = append(segs, segOf{p, s})
		}
	}
	sort.Slice(segs, func(i, j int) bool {
		if segs[i].p.dev != segs[j].p.dev {
			return segs[i].p.dev < segs[j].p.dev
		}
		return segs[i].seg.Addr < segs[j].seg.Addr
	})
	for _, so := range segs {
		v.writeSegment(e, so.p, so.seg, writeFrames)
	}
	e.EndList()

	e.Str("device_traces")
	e.BeginList()
	for _, ev := range v.entries {
		devs = max(devs, ev.dev+1)
	}
	for d := trace.DeviceID(0); d < devs; d++ {
		e.BeginList()
		for i := range v.entries {
			if x := &v.entries[i]; x.dev == d {
				v.writeEntry(e, x, writeFrames)
			}
		}
		e.EndList()
	}
	e.EndList()

	e.Str("allocator_settings")
	e.BeginDict()
	e.Str("PYTORCH_CUDA_ALLOC_CONF")
	e.Str(conf)
	e.Str("expandable_segments")
	e.Bool(strings.Contains(conf, "expandable_segments:True"))
	e.EndDict()
	e.Str("external_annotations")
	e.BeginList()
	e.EndList()

	e.EndDict()
	return e.Close()
}

func (v *vizRecorder) writeSegment(e *pickle.Encoder, p *probe, s trace.Segment, writeFrames func(trace.StackID)) {
	var allocated, active, requested uint64
	for _, b := range s.Blocks {
		switch b.State {
		case trace.BlockAllocated:
			allocated += b.SizeBytes
			active += b.SizeBytes
		case trace.BlockPendingFree:
			active += b.SizeBytes
		}
		if b.State != trace.BlockInactive {
			requested += p.requested(b)
		}
	}
	pool := s.Pool
	if pool == "" {
		pool = "large"
	}
	e.BeginDict()
	e.Str("device")
	e.Int(int64(p.dev))
	e.Str("address")
	e.Uint(s.Addr)
	e.Str("total_size")
	e.Uint(s.SizeBytes)
	e.Str("allocated_size")
	e.Uint(allocated)
	e.Str("active_size")
	e.Uint(active)
	e.Str("requested_size")
	e.Uint(requested)
	e.Str("stream")
	e.Uint(uint64(s.Stream))
	e.Str("segment_type")
	e.Str(pool)
	e.Str("segment_pool_id")
	e.IntPair(0, 0)
	e.Str("is_expandable")
	e.Bool(s.Expandable)
	e.Str("frames")
	writeFrames(trace.NoStack)
	e.Str("blocks")
	e.BeginList()
	for _, b := range s.Blocks {
		stack := trace.NoStack
		if b.State != trace.BlockInactive {
			if o, ok := p.origins[b.Addr]; ok {
				stack = o.stack
			}
		}
		e.BeginDict()
		e.Str("address")
		e.Uint(b.Addr)
		e.Str("size")
		e.Uint(b.SizeBytes)
		e.Str("requested_size")
		e.Uint(p.requested(b))
		e.Str("state")
		e.Str(string(b.State))
		e.Str("frames")
		writeFrames(stack)
		e.EndDict()
	}
	e.EndList()
	e.EndDict()
}

// requested returns the bytes requested of a live block; 0 for a free one.
func (p *probe) requested(b trace.Block) uint64 {
	if b.State == trace.BlockInactive {
		return 0
	}
	if o, ok := p.origins[b.Addr]; ok {
		return o.requested
	}
	return b.RequestedBytes
}

func (v *vizRecorder) writeEntry(e *pickle.Encoder, x *vizEntry, writeFrames func(trace.StackID)) {
	e.BeginDict()
	e.Str("action")
	e.Str(vizActions[x.action])
	if x.action == vizOOM {
		e.Str("device_free")
		e.Uint(x.deviceFree)
	} else {
		e.Str("addr")
		e.Uint(x.addr)
	}
	e.Str("size")
	e.Uint(x.size)
	e.Str("stream")
	e.Uint(uint64(x.stream))
	e.Str("time_us")
	e.Int(x.timeNS / 1000)
	e.Str("compile_context")
	e.Str("N/A")
	e.Str("user_metadata")
	e.Str("")
	if x.stack != trace.NoStack {
		e.Str("frames")
		writeFrames(x.stack)
	}
	e.EndDict()
}
