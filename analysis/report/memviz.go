package report

import (
	"errors"
	"fmt"
	"io"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
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
	// Progress, when set, is called now and then with the events replayed
	// so far over all the replays, and the replays done (as
	// analysis.CompareOptions' Progress).
	Progress func(events int64, runsDone, runs int)
	// SpillDir is where memory_viz keeps what it cannot write in place
	// (the trace entries of devices after the first, the events PyTorch
	// has no entry for) while it streams, in temporary files removed at
	// once where the system allows ("": os.TempDir()).
	SpillDir string
}

// The actions of PyTorch's trace entries, as memory_viz reads them.
var vizActions = [...]string{"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
	"segment_map", "segment_unmap", "oom", "snapshot"}

const (
	vizAlloc = iota
	vizFreeRequested
	vizFreeCompleted
	vizSegmentAlloc
	vizSegmentFree
	vizSegmentMap
	vizSegmentUnmap
	vizOOM
	vizSnapshot
)

// vizEntry is one trace entry of the replay: a call a policy made, kept
// until the observer sees the event it served (which stamps its time).
type vizEntry struct {
	action     uint8
	p          *probe // the policy that made the call (its device)
	addr, size uint64
	stream     trace.StreamID
	timeNS     int64
	stack      trace.StackID
	deviceFree uint64 // for an oom
}

// vizRecorder turns a replay's calls into PyTorch trace entries as they
// are made, and streams them (vizStream): it holds the calls made while
// one event is replayed, never the replay's.
type vizRecorder struct {
	out      *vizStream
	pending  []vizEntry
	probes   []*probe
	capacity uint64
	lastNS   int64
}

func (v *vizRecorder) add(e vizEntry) { v.pending = append(v.pending, e) }

func (v *vizRecorder) hooks() *hooks {
	return &hooks{
		keepFinal: true,
		malloc: func(p *probe, b driver.Block, n uint64, s trace.StreamID) {
			v.add(vizEntry{action: vizAlloc, p: p, addr: b.Addr, size: n, stream: s})
		},
		oom: func(p *probe, n uint64, s trace.StreamID) {
			v.add(vizEntry{action: vizOOM, p: p, size: n, stream: s})
		},
		freeReq: func(p *probe, b driver.Block) {
			o := p.origins[b.Addr]
			v.add(vizEntry{action: vizFreeRequested, p: p, addr: b.Addr, size: o.requested, stream: o.stream})
		},
		freeDone: func(p *probe, b driver.Block) {
			o := p.origins[b.Addr]
			v.add(vizEntry{action: vizFreeCompleted, p: p, addr: b.Addr, size: o.requested, stream: o.stream})
		},
		device: func(c devCall) {
			a := map[trace.Kind]uint8{trace.KindSegmentAlloc: vizSegmentAlloc, trace.KindSegmentFree: vizSegmentFree,
				trace.KindSegmentMap: vizSegmentMap, trace.KindSegmentUnmap: vizSegmentUnmap}[c.kind]
			v.add(vizEntry{action: a, p: c.p, addr: c.addr, size: c.size, stream: c.strm})
		},
	}
}

// entryKind is the trace event kind whose stack an entry of action a
// takes, when the event replayed is of that kind.
var entryKind = [...]trace.Kind{vizAlloc: trace.KindAlloc, vizFreeRequested: trace.KindFreeRequested,
	vizFreeCompleted: trace.KindFreeCompleted, vizOOM: trace.KindAlloc}

// observe writes the calls made while the sample's event was replayed, at
// its time and on its device, then the event itself when PyTorch's trace
// entries cannot hold it (vizStream.event).
func (v *vizRecorder) observe(s *replay.Sample) {
	p := unwrapProbe(s.Policy)
	if p != nil {
		p.observed(s.Event.Device)
		if s.Event.Kind == trace.KindAlloc {
			p.noteAlloc(&s.Event)
		}
	}
	if s.TimeNS != 0 {
		v.lastNS = s.TimeNS
	}
	for i := range v.pending {
		e := &v.pending[i]
		e.timeNS, e.stack = v.lastNS, trace.NoStack
		dev := s.Event.Device
		if e.p != nil && e.p.devSet {
			dev = e.p.dev // a free held from the event before, of another device
		}
		if int(e.action) < len(entryKind) && s.Event.Kind == entryKind[e.action] ||
			e.action == vizOOM && s.Event.Kind == trace.KindOOM {
			e.stack = s.Event.Stack
		}
		if e.action == vizOOM && v.capacity > s.ReservedBytes {
			e.deviceFree = v.capacity - s.ReservedBytes
		}
		v.out.entry(dev, e)
	}
	v.pending = v.pending[:0]
	switch s.Event.Kind {
	case trace.KindAlloc, trace.KindFreeRequested, trace.KindFreeCompleted, trace.KindOOM,
		trace.KindSegmentAlloc, trace.KindSegmentFree, trace.KindSegmentMap, trace.KindSegmentUnmap:
		// the replay's own calls stand for them
	case trace.KindSnapshot:
		v.out.entry(s.Event.Device, &vizEntry{action: vizSnapshot, size: s.Event.SizeBytes, timeNS: v.lastNS, stream: s.Event.Stream})
	default:
		v.out.event(&s.Event, v.lastNS)
	}
}

// flush writes the calls made after the last event (the replay's end),
// at the last time seen, each on its policy's device.
func (v *vizRecorder) flush() {
	for i := range v.pending {
		e := &v.pending[i]
		e.timeNS = v.lastNS
		dev := trace.DeviceID(0)
		if e.p != nil {
			dev = e.p.dev
		}
		v.out.entry(dev, e)
	}
	v.pending = v.pending[:0]
}

// WriteMemoryViz replays the trace under opts.Policy and writes the
// replay as a PyTorch memory snapshot pickle (the dict that
// torch.cuda.memory._dump_snapshot writes), so that PyTorch's memory_viz
// shows the run as it would have gone under that policy or setting:
//
//   - "device_traces": every alloc, free, device call and OOM of the
//     replay, on its device, at its time (microseconds, as PyTorch's);
//   - "segments": the policy's segments and blocks as the replay ends,
//     with their private pools (segment_pool_id);
//   - "allocator_settings": the settings the replay ran under;
//   - "external_annotations": the trace's markers;
//   - "fragsim": what the snapshot format has no place for, which
//     PyTorch's readers ignore: the trace's header (GPU, memory, initial
//     state) and its events that are no trace entry (empty_cache(), memory
//     fraction changes, device-memory samples, private pool routing,
//     markers), each at its place among its device's entries.
//
// fragsim import reads the snapshot back as the trace replayed: its
// replay under the settings written makes the same calls at the same
// addresses. The snapshot is written as the replay goes: the memory used
// does not grow with the trace (see vizStream).
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
	out, err := newVizStream(w, r, opts.SpillDir)
	if err != nil {
		return nil, err
	}
	defer out.close()
	v := &vizRecorder{out: out, capacity: opts.Config.CapacityBytes}
	if v.capacity == 0 && h != nil {
		v.capacity = h.GPUTotalBytes
	}
	cfg := opts.Config
	cfg.Observer, cfg.Progress = v.observe, nil
	if p := opts.Progress; p != nil {
		cfg.Progress = func(n int64) { p(n, 0, 1) }
	}
	inspects := true
	res, err := replay.Run(r, probeFactory(f, v.hooks(), func(p *probe) {
		v.probes = append(v.probes, p)
		inspects = inspects && p.inspects()
	}), cfg)
	if err != nil && (res == nil || !errors.Is(err, trace.ErrTruncated)) {
		return res, fmt.Errorf("%s: %w", policy, err)
	}
	if !inspects {
		return res, fmt.Errorf("%s cannot list its segments: no snapshot can be written for it", policy)
	}
	v.flush()
	conf := opts.Conf
	if conf == "" && h != nil {
		conf = h.AllocConf
	}
	if werr := out.finish(v.probes, vizSettings(v.probes, conf)); werr != nil {
		return res, werr
	}
	return res, err
}
