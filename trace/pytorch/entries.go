package pytorch

import (
	"fmt"

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

// entries reads device_traces from the decoded pickle's tables directly
// (a snapshot may hold millions of entries) into the raw events of the
// streamed decode (see streamer.SetEntry), device after device, keeping
// Python's semantics: a key set twice keeps its last value.
func (c *converter) entries() error {
	doc := c.doc
	var devs [][]pickle.Value
	if c.salvaged != nil {
		devs = c.salvaged
	} else {
		if k := doc.Kind(c.traces); k != pickle.KindList && k != pickle.KindTuple {
			return fmt.Errorf("device_traces is a %s, not a list", k)
		}
		for dev, l := range doc.Slice(c.traces) {
			if k := doc.Kind(l); k != pickle.KindList && k != pickle.KindTuple {
				return fmt.Errorf("device_traces[%d] is a %s, not a list", dev, k)
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
	raw := &evlog{dir: c.opt.SpillDir}
	c.snap.raw = raw
	raw.grow(min(total, spillEvents+1), total)
	seqs := make([]devSeq, len(devs))
	for dev, l := range devs {
		seqs[dev] = devSeq{dev: trace.DeviceID(dev), from: raw.Len(), to: raw.Len() + len(l)}
		for k, it := range l {
			if doc.Kind(it) != pickle.KindDict {
				return fmt.Errorf("device_traces[%d][%d] is a %s, not a dict", dev, k, doc.Kind(it))
			}
			e := event{frames: noFrames}
			var addr, devFree uint64
			ps := doc.PairSlice(it)
			for i := 0; i+1 < len(ps); i += 2 {
				kv, v := ps[i], ps[i+1]
				id, ok := doc.StrID(kv)
				if !ok {
					continue
				}
				switch id {
				case keys.action:
					e.set |= setAction
					e.Kind = trace.KindInvalid
					if aid, ok := doc.StrID(v); ok {
						if kind, known := kinds[aid]; known {
							e.Kind = kind
						}
					}
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
						e.TimeNS = n * 1000
						e.set |= setTimeOK
					}
				case keys.frames:
					if doc.Len(v) > 0 && doc.Kind(v) == pickle.KindList {
						e.frames = pickle.Value(c.snap.stacks.intern(doc, v))
					}
				case keys.deviceFree:
					n, _ := doc.Int(v)
					devFree = uint64(n)
				case keys.userMetadata:
					e.text = 0
					if sid, ok := doc.StrID(v); ok {
						e.text = int32(sid) + 1
					}
				}
			}
			e.Addr = addr
			if e.Kind == trace.KindOOM {
				e.Addr = devFree // an OOM's Aux
			}
			if e.set&setAction != 0 && e.Kind == trace.KindInvalid {
				// The last action value names the unknown action.
				for i := len(ps) - 2; i >= 0; i -= 2 {
					if id, ok := doc.StrID(ps[i]); ok && id == keys.action {
						if c.snap.unknown == nil {
							c.snap.unknown = map[uint32]string{}
						}
						c.snap.unknown[uint32(raw.Len())], _ = doc.Str(ps[i+1])
						break
					}
				}
			}
			raw.push(e)
			if c.opt.Progress != nil && raw.Len()&(1<<18-1) == 0 {
				c.opt.Progress("convert", int64(raw.Len()), int64(total))
			}
		}
	}
	c.snap.seqs = seqs
	return raw.finish()
}
