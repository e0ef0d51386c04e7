package pytorch

import (
	"fmt"
	"strconv"
	"unsafe"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// entryKeys are the string-table indexes of the trace entry keys (absent
// keys get an index no string has).
type entryKeys struct {
	action, addr, size, stream, timeUS, frames, deviceFree, userMetadata uint32
}

func (c *converter) keys() entryKeys {
	id := func(s string) uint32 {
		if i, ok := c.doc.LookupStr(s); ok {
			return i
		}
		return ^uint32(0)
	}
	return entryKeys{id("action"), id("addr"), id("size"), id("stream"), id("time_us"), id("frames"), id("device_free"), id("user_metadata")}
}

// entries converts device_traces into one event sequence per device,
// reading the decoded pickle's tables directly: a snapshot may hold
// millions of entries.
func (c *converter) entries() ([][]event, error) {
	doc := c.doc
	var devs [][]pickle.Value
	if c.salvaged != nil {
		devs = c.salvaged
	} else {
		if k := doc.Kind(c.traces); k != pickle.KindList && k != pickle.KindTuple {
			return nil, fmt.Errorf("device_traces is a %s, not a list", k)
		}
		for dev, l := range doc.Slice(c.traces) {
			if k := doc.Kind(l); k != pickle.KindList && k != pickle.KindTuple {
				return nil, fmt.Errorf("device_traces[%d] is a %s, not a list", dev, k)
			}
			devs = append(devs, doc.Slice(l))
		}
	}
	total := 0
	for _, l := range devs {
		total += len(l)
	}
	keys := c.keys()
	// Actions by string index.
	kinds := map[uint32]trace.Kind{}
	for name, k := range actionKinds {
		if i, ok := doc.LookupStr(name); ok {
			kinds[i] = k
		}
	}
	sum := &c.snap.summary
	perDev := make([][]event, len(devs))
	done := 0
	for dev, l := range devs {
		evs := make([]event, 0, len(l))
		if len(l) >= 1<<16 {
			pickle.Prefault(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(evs))), uintptr(cap(evs))*unsafe.Sizeof(event{})))
		}
		counts := map[string]int{}
		var byKind [trace.NumKinds]int
		var lastTime int64
		var err error
		for k, it := range l {
			if doc.Kind(it) != pickle.KindDict {
				err = fmt.Errorf("device_traces[%d][%d] is a %s, not a dict", dev, k, doc.Kind(it))
				break
			}
			e := event{frames: noFrames}
			e.Device = trace.DeviceID(dev)
			var actionID uint32 = ^uint32(0)
			var action pickle.Value
			hasAction := false
			var addr, devFree uint64
			var meta pickle.Value
			hasMeta := false
			ps := doc.PairSlice(it)
			for i := 0; i+1 < len(ps); i += 2 {
				kv, v := ps[i], ps[i+1]
				id, ok := doc.StrID(kv)
				if !ok {
					continue
				}
				switch id {
				case keys.action:
					action, hasAction = v, true
					actionID, _ = doc.StrID(v)
				case keys.addr:
					n, _ := doc.Int(v)
					addr = uint64(n)
				case keys.size:
					n, _ := doc.Int(v)
					e.SizeBytes = uint64(n)
				case keys.stream:
					n, _ := doc.Int(v)
					e.Stream = trace.StreamID(n)
				case keys.timeUS:
					if n, ok := doc.Int(v); ok {
						lastTime = n * 1000
					}
				case keys.frames:
					if doc.Len(v) > 0 && doc.Kind(v) == pickle.KindList {
						e.frames = v
					}
				case keys.deviceFree:
					n, _ := doc.Int(v)
					devFree = uint64(n)
				case keys.userMetadata:
					meta, hasMeta = v, true
				}
			}
			e.TimeNS = lastTime
			kind, known := kinds[actionID]
			if !hasAction {
				known = false
			}
			if !known {
				name := "(none)"
				if hasAction {
					name, _ = doc.Str(action)
				}
				counts[name]++
				if sum.UnknownActs == nil {
					sum.UnknownActs = map[string]int{}
				}
				sum.UnknownActs[name]++
				continue
			}
			byKind[kind]++
			e.Kind = kind
			switch kind {
			case trace.KindOOM:
				e.Addr = devFree // an OOM's Aux
			case trace.KindSnapshot:
			case trace.KindMarker:
				e.Addr = addr
				e.Marker = trace.MarkerText
				text := "annotate"
				if hasMeta {
					if md, _ := doc.Str(meta); md != "" {
						text += " " + md
					}
				}
				e.text = c.snap.text(text)
			default:
				e.Addr = addr
			}
			evs = append(evs, e)
			done++
			if c.opt.Progress != nil && done&(1<<18-1) == 0 {
				c.opt.Progress("convert", int64(done), int64(total))
			}
		}
		if err != nil {
			return nil, err
		}
		for name, k := range actionKinds {
			if n := byKind[k]; n > 0 {
				counts[name] += n
			}
		}
		sum.Actions[strconv.Itoa(dev)] = counts
		perDev[dev] = evs
	}
	return perDev, nil
}
