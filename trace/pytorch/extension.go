package pytorch

import (
	"encoding/json"
	"fmt"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// The "fragsim" key of a snapshot that fragsim export --format memory_viz
// wrote (analysis/report.WriteMemoryViz): what the snapshot format has no
// place for, so that the import gives back the trace replayed. PyTorch's
// readers ignore the key.
//
//	"fragsim": {
//	  "version": 1,
//	  "header": the trace header, as JSON: the GPU, its memory, the memory
//	            fraction, the tags and the initial state of a trace that
//	            starts mid-run,
//	  "events": one list per device (device_traces' index) of the events
//	            that are no trace entry, in order, each
//	            [place, kind, time_ns, stream, aux, size, marker, text]:
//	            it goes before the device's entry of index place (after
//	            its last entry when place is their count); kind is one of
//	            extKinds, marker a trace.MarkerKind name.
//	}
//
// With it, the import takes those events and that header for what it
// would infer (empty_cache() calls, private pools, the initial state) and
// the external annotations (the same markers). The key is checked as any
// input is: a bad value is an error naming it.

// extVersion is the version of the "fragsim" key this package reads.
const extVersion = 1

// maxExtHeaderBytes bounds the header's JSON.
const maxExtHeaderBytes = 256 << 20

// extKinds are the event kinds the "fragsim" key may hold.
var extKinds = map[trace.Kind]bool{trace.KindEmptyCache: true, trace.KindSetFraction: true, trace.KindMarker: true,
	trace.KindDeviceMem: true, trace.KindPoolBegin: true, trace.KindPoolEnd: true, trace.KindPoolRelease: true}

// extension is a decoded "fragsim" key.
type extension struct {
	header trace.Header
	// events by device (device_traces' index), with the place of each.
	events [][]event
	places [][]int32
}

// auxInAddr reports whether an event of kind k keeps its trace.Event.Aux
// in event.Addr (they have no address): an OOM's device free bytes, and
// the events of the "fragsim" key.
func auxInAddr(k trace.Kind) bool {
	switch k {
	case trace.KindOOM, trace.KindSetFraction, trace.KindDeviceMem, trace.KindPoolBegin, trace.KindPoolEnd, trace.KindPoolRelease,
		trace.KindMarker: // a synthetic trace's step markers number their steps
		return true
	}
	return false
}

// readExtension decodes the "fragsim" key v; counts holds the entries of
// each device (device_traces' lists), which the places must lie within.
func (c *converter) readExtension(v any, counts []int) (*extension, error) {
	d, ok := v.(*pickle.Dict)
	if !ok {
		return nil, fmt.Errorf("snapshot key \"fragsim\": a %T, not a dict", v)
	}
	if n, ok := getInt(d, "version"); !ok || n != extVersion {
		return nil, fmt.Errorf("snapshot key \"fragsim\": version %v, want %d (written by another fragsim)", n, extVersion)
	}
	x := &extension{}
	hj, _ := getString(d, "header")
	if len(hj) > maxExtHeaderBytes {
		return nil, fmt.Errorf("snapshot key \"fragsim\": a header of %d bytes, more than %d", len(hj), maxExtHeaderBytes)
	}
	if hj != "" {
		if err := json.Unmarshal([]byte(hj), &x.header); err != nil {
			return nil, fmt.Errorf("snapshot key \"fragsim\": header: %w", err)
		}
		if err := x.header.Check(); err != nil {
			return nil, fmt.Errorf("snapshot key \"fragsim\": header: %w", err)
		}
	}
	evs, _ := d.Get("events")
	for dev, l := range asItems(evs) {
		items := asItems(l)
		if dev >= len(counts) && len(items) > 0 {
			counts = append(counts, make([]int, dev+1-len(counts))...)
		}
		var out []event
		var places []int32
		for i, it := range items {
			e, place, err := c.extEvent(asItems(it), trace.DeviceID(dev), &x.header)
			if err == nil && (place > counts[dev] || len(places) > 0 && place < int(places[len(places)-1])) {
				err = fmt.Errorf("place %d: want %d to %d (the device's entries), in order", place, max(0, int(lastOf(places))), counts[dev])
			}
			if err != nil {
				return nil, fmt.Errorf("snapshot key \"fragsim\": device %d, event %d: %w", dev, i, err)
			}
			out = append(out, e)
			places = append(places, int32(place))
		}
		x.events = append(x.events, out)
		x.places = append(x.places, places)
	}
	return x, nil
}

func lastOf(p []int32) int32 {
	if len(p) == 0 {
		return 0
	}
	return p[len(p)-1]
}

// extEvent decodes [place, kind, time_ns, stream, aux, size, marker, text].
func (c *converter) extEvent(f []any, dev trace.DeviceID, h *trace.Header) (event, int, error) {
	var e event
	if len(f) != 8 {
		return e, 0, fmt.Errorf("%d fields, want 8", len(f))
	}
	place, ok1 := toUint(f[0])
	name, ok2 := f[1].(string)
	t, ok3 := toUint(f[2])
	stream, ok4 := toUint(f[3])
	aux, ok5 := toUint(f[4])
	size, ok6 := toUint(f[5])
	marker, ok7 := f[6].(string)
	text, ok8 := f[7].(string)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8) || place > 1<<31-1 || t > 1<<63-1 {
		return e, 0, fmt.Errorf("fields %v: want [place, kind, time_ns, stream, aux, size, marker, text]", f)
	}
	k, ok := trace.ParseKind(name)
	if !ok || !extKinds[k] {
		return e, 0, fmt.Errorf("kind %q: not an event the key holds", name)
	}
	mk, ok := trace.ParseMarkerKind(marker)
	if !ok {
		return e, 0, fmt.Errorf("marker kind %q", marker)
	}
	ev := trace.Event{Kind: k, Device: dev, Stream: trace.StreamID(stream), TimeNS: int64(t), SizeBytes: size, Aux: aux}
	if err := h.CheckEvent(&ev); err != nil {
		return e, 0, err
	}
	e = event{Kind: k, Device: dev, Stream: ev.Stream, TimeNS: ev.TimeNS, SizeBytes: size, Addr: aux, frames: noFrames}
	if k == trace.KindMarker {
		e.Marker = mk
		e.text = c.snap.text(text)
	}
	return e, int(place), nil
}

// toUint returns v as a uint64 when it is a non-negative int.
func toUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case int64:
		return uint64(x), x >= 0
	case uint64:
		return x, true
	}
	return 0, false
}

// useExtension puts the key's header under the snapshot's (the settings
// and the producer are the snapshot's own): what it cannot say.
func (c *converter) useExtension(x *extension) {
	h := &c.snap.header
	m := x.header
	m.Initial = nil
	h.Merge(&m)
}
