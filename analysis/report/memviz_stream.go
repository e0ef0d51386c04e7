package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// VizVersion is the version of the "fragsim" key WriteMemoryViz writes
// into a snapshot (trace/pytorch reads it back).
const VizVersion = 1

// maxVizDevices bounds the devices of an exported trace: device_traces
// holds a list for every index up to the largest.
const maxVizDevices = 1 << 10

// vizStream writes a snapshot as the replay goes. The first device's
// entries go into the output as they come; every other device's, and the
// events and markers that go in other keys, are written to temporary
// files (spools: pickle fragments, unnamed where the system allows) and
// copied into the output at the end. Its memory is that of its buffers,
// whatever the trace's length.
type vizStream struct {
	r     *trace.Reader
	enc   *pickle.Encoder
	dir   string
	devs  []*vizDev
	annot *spoolEnc // external_annotations' items
	err   error     // the first error of a spool
}

// vizDev is what one device has written.
type vizDev struct {
	entries *pickle.Encoder // where its entries go: the output, or its spool
	spool   *spoolEnc       // its entries, for a device after the first
	n       int             // its entries written
	ext     *spoolEnc       // its events that are no entry ("fragsim" key)
}

// spoolEnc is a pickle fragment on a temporary file.
type spoolEnc struct {
	f    *os.File
	name string // set when the system kept its name (removed at close)
	enc  *pickle.Encoder
}

func newSpoolEnc(dir string) (*spoolEnc, error) {
	f, err := os.CreateTemp(dir, "fragsim-export-*.tmp")
	if err != nil {
		return nil, err
	}
	s := &spoolEnc{f: f}
	if os.Remove(f.Name()) != nil {
		s.name = f.Name()
	}
	s.enc = pickle.NewFragment(f)
	s.enc.BeginList()
	return s, nil
}

// embed ends the spool's list and writes it into e as one value.
func (s *spoolEnc) embed(e *pickle.Encoder) error {
	s.enc.EndList()
	if err := s.enc.Close(); err != nil {
		return err
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return e.Embed(s.f)
}

func (s *spoolEnc) close() {
	s.f.Close()
	if s.name != "" {
		os.Remove(s.name)
	}
}

func newVizStream(w io.Writer, r *trace.Reader, dir string) (*vizStream, error) {
	v := &vizStream{r: r, enc: pickle.NewEncoder(w), dir: dir}
	v.enc.BeginDict()
	v.enc.Str("device_traces")
	v.enc.BeginList()
	v.enc.BeginList() // the first device's entries
	v.devs = []*vizDev{{entries: v.enc}}
	return v, nil
}

// close removes the spools.
func (v *vizStream) close() {
	for _, d := range v.devs {
		if d.spool != nil {
			d.spool.close()
		}
		if d.ext != nil {
			d.ext.close()
		}
	}
	if v.annot != nil {
		v.annot.close()
	}
}

// dev returns the device's writer, making it (and its spool) at its first
// entry; nil (with v.err set) for a device beyond what a snapshot holds.
func (v *vizStream) dev(id trace.DeviceID) *vizDev {
	if id < 0 || id >= maxVizDevices {
		if v.err == nil {
			v.err = fmt.Errorf("device %d: a snapshot holds devices 0 to %d", id, maxVizDevices-1)
		}
		return nil
	}
	for int(id) >= len(v.devs) {
		v.devs = append(v.devs, nil)
	}
	d := v.devs[id]
	if d == nil {
		d = &vizDev{}
		s, err := newSpoolEnc(v.dir)
		if err != nil {
			v.fail(err)
			return nil
		}
		d.spool, d.entries = s, s.enc
		v.devs[id] = d
	}
	return d
}

func (v *vizStream) fail(err error) {
	if v.err == nil {
		v.err = fmt.Errorf("a temporary file for the export: %w", err)
	}
}

// entry writes one trace entry of the device.
func (v *vizStream) entry(id trace.DeviceID, x *vizEntry) {
	d := v.dev(id)
	if d == nil {
		return
	}
	e := d.entries
	e.BeginDict()
	e.Str("action")
	e.Str(vizActions[x.action])
	switch x.action {
	case vizOOM:
		e.Str("device_free")
		e.Uint(x.deviceFree)
	default:
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
		v.frames(e, x.stack)
	}
	e.EndDict()
	d.n++
}

// frames writes a stack as PyTorch's list of frame dicts.
func (v *vizStream) frames(e *pickle.Encoder, id trace.StackID) {
	e.BeginList()
	if id != trace.NoStack {
		for _, f := range v.r.Stack(id) {
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

// event writes an event that no trace entry can hold, at its place among
// its device's entries (after those written so far): as
// [place, kind, time_ns, stream, aux, size, marker kind, text]. A marker
// also becomes an external annotation, for PyTorch's viewers.
func (v *vizStream) event(ev *trace.Event, lastNS int64) {
	d := v.dev(ev.Device)
	if d == nil {
		return
	}
	if d.ext == nil {
		s, err := newSpoolEnc(v.dir)
		if err != nil {
			v.fail(err)
			return
		}
		d.ext = s
	}
	t := ev.TimeNS
	if t == 0 {
		t = lastNS
	}
	text := ""
	if ev.Text != trace.NoString {
		text = v.r.String(ev.Text)
	}
	e := d.ext.enc
	e.BeginList()
	e.Int(int64(d.n))
	e.Str(ev.Kind.String())
	e.Int(t)
	e.Uint(uint64(ev.Stream))
	e.Uint(ev.Aux)
	e.Uint(ev.SizeBytes)
	e.Str(ev.Marker.String())
	e.Str(text)
	e.EndList()
	if ev.Kind != trace.KindMarker {
		return
	}
	if v.annot == nil {
		s, err := newSpoolEnc(v.dir)
		if err != nil {
			v.fail(err)
			return
		}
		v.annot = s
	}
	stage := map[trace.MarkerKind]string{trace.MarkerBegin: "START", trace.MarkerEnd: "END"}[ev.Marker]
	if stage == "" {
		stage = ev.Marker.String()
	}
	a := v.annot.enc
	a.BeginDict()
	a.Str("name")
	a.Str(text)
	a.Str("stage")
	a.Str(stage)
	a.Str("device")
	a.Int(int64(ev.Device))
	a.Str("time_us")
	a.Int(t / 1000)
	a.EndDict()
}

// finish writes the rest of the snapshot: the other devices' entries,
// the final segments of the probed policies, the settings, the
// annotations and the "fragsim" key.
func (v *vizStream) finish(probes []*probe, settings func(*pickle.Encoder)) error {
	if v.err != nil {
		return v.err
	}
	e := v.enc
	e.EndList() // the first device's entries
	for _, d := range v.devs[1:] {
		if err := v.embedList(d, func(d *vizDev) *spoolEnc { return d.spool }); err != nil {
			return err
		}
	}
	e.EndList()

	e.Str("segments")
	e.BeginList()
	type segOf struct {
		p   *probe
		seg trace.Segment
		id  uint64
	}
	var segs []segOf
	for _, p := range probes {
		for i, seg := range p.final {
			segs = append(segs, segOf{p, seg, p.finalPools[i]})
		}
	}
	sort.Slice(segs, func(i, j int) bool {
		if segs[i].p.dev != segs[j].p.dev {
			return segs[i].p.dev < segs[j].p.dev
		}
		return segs[i].seg.Addr < segs[j].seg.Addr
	})
	for _, so := range segs {
		v.writeSegment(so.p, so.seg, so.id)
	}
	e.EndList()

	e.Str("allocator_settings")
	settings(e)

	e.Str("external_annotations")
	if v.annot != nil {
		if err := v.annot.embed(e); err != nil {
			return err
		}
	} else {
		e.BeginList()
		e.EndList()
	}

	e.Str("fragsim")
	e.BeginDict()
	e.Str("version")
	e.Int(VizVersion)
	e.Str("header")
	hj, err := json.Marshal(vizHeader(v.r.Header()))
	if err != nil {
		return err
	}
	e.Str(string(hj))
	e.Str("events")
	e.BeginList()
	for _, d := range v.devs {
		if err := v.embedList(d, func(d *vizDev) *spoolEnc { return d.ext }); err != nil {
			return err
		}
	}
	e.EndList()
	e.EndDict()

	e.EndDict()
	return e.Close()
}

// embedList writes the list of d's spool (of), or an empty list.
func (v *vizStream) embedList(d *vizDev, of func(*vizDev) *spoolEnc) error {
	if d != nil && of(d) != nil {
		return of(d).embed(v.enc)
	}
	v.enc.BeginList()
	v.enc.EndList()
	return nil
}

// vizHeader is what the snapshot keeps of the trace's header: what a
// snapshot cannot say (the GPU, its memory, the fraction, the initial
// state, the tags). The producer, its notes and the settings are the
// import's own.
func vizHeader(h *trace.Header) *trace.Header {
	if h == nil {
		return &trace.Header{}
	}
	return &trace.Header{GPUName: h.GPUName, GPUTotalBytes: h.GPUTotalBytes, DriverVersion: h.DriverVersion,
		CUDAVersion: h.CUDAVersion, TorchVersion: h.TorchVersion, Host: h.Host, Created: h.Created,
		CommandLine: h.CommandLine, MemoryFraction: h.MemoryFraction, Tags: h.Tags, Initial: h.Initial}
}

func (v *vizStream) writeSegment(p *probe, s trace.Segment, pool uint64) {
	e := v.enc
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
	kind := s.Pool
	if kind == "" {
		kind = "large"
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
	e.Str(kind)
	e.Str("segment_pool_id")
	a, b := poolPair(pool)
	e.IntPair(int64(a), int64(b))
	e.Str("is_expandable")
	e.Bool(s.Expandable)
	e.Str("frames")
	v.frames(e, trace.NoStack)
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
		v.frames(e, stack)
		e.EndDict()
	}
	e.EndList()
	e.EndDict()
}

// poolPair is the inverse of trace.PoolID: the pair (a, b) of PyTorch's
// MempoolId_t a pool ID folds; (0, 0) for the default pool (0, as
// PoolInspector gives it, or trace.PoolID(0, 0)).
func poolPair(id uint64) (a, b uint64) {
	switch {
	case id == 0 || id == trace.PoolID(0, 0):
		return 0, 0
	case id&(1<<63) != 0:
		return 0, id &^ (1 << 63)
	}
	return id &^ (1 << 63), 0
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
