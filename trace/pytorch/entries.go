package pytorch

import (
	"fmt"
	"math"

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
					n, bad := entryUint(doc, v, math.MaxUint64)
					if bad != "" {
						return fmt.Errorf("device_traces[%d][%d]: addr %s", dev, k, bad)
					}
					addr = n
				case keys.size:
					n, bad := entryUint(doc, v, c.maxSize())
					if bad != "" {
						return fmt.Errorf("device_traces[%d][%d]: size %s", dev, k, bad)
					}
					e.SizeBytes = n
				case keys.stream:
					n, _ := doc.Int(v)
					e.Stream = trace.StreamID(n)
				case keys.timeUS:
					n, bad := entryTime(doc, v)
					if bad != "" {
						return fmt.Errorf("device_traces[%d][%d]: time_us %s", dev, k, bad)
					}
					e.TimeNS = n
					e.set |= setTimeOK
				case keys.frames:
					if doc.Len(v) > 0 && doc.Kind(v) == pickle.KindList {
						e.frames = pickle.Value(c.snap.stacks.intern(doc, v))
					}
				case keys.deviceFree:
					n, bad := entryUint(doc, v, math.MaxUint64)
					if bad != "" {
						return fmt.Errorf("device_traces[%d][%d]: device_free %s", dev, k, bad)
					}
					devFree = n
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

// entryUint reads an entry's size, address or device_free: an integer (a
// float only when it is one) from 0 to most. It returns what is wrong
// with v, or "".
func entryUint(doc *pickle.Doc, v pickle.Value, most uint64) (uint64, string) {
	var x uint64
	switch k := doc.Kind(v); k {
	case pickle.KindInt:
		n, _ := doc.Int(v)
		if n < 0 {
			return 0, fmt.Sprintf("is negative (%d)", n)
		}
		x = uint64(n)
	case pickle.KindUint:
		n, _ := doc.Int(v)
		x = uint64(n)
	case pickle.KindFloat:
		f, _ := doc.Float(v)
		if f != math.Trunc(f) || f < 0 || f >= 1<<64 {
			return 0, fmt.Sprintf("is the float %v, not a byte count or address", f)
		}
		x = uint64(f)
	default:
		return 0, fmt.Sprintf("is a %s, not an integer", k)
	}
	if x > most {
		return 0, fmt.Sprintf("%d is above %d bytes, more than the device holds", x, most)
	}
	return x, ""
}

// entryTime reads an entry's time_us into nanoseconds: an integer (a float
// only when it is one) whose nanoseconds fit in 63 bits.
func entryTime(doc *pickle.Doc, v pickle.Value) (int64, string) {
	const most = math.MaxInt64 / 1000
	switch k := doc.Kind(v); k {
	case pickle.KindInt, pickle.KindUint:
		n, _ := doc.Int(v)
		if k == pickle.KindUint {
			return 0, fmt.Sprintf("%d overflows 64-bit nanoseconds", uint64(n))
		}
		if n > most || n < -most {
			return 0, fmt.Sprintf("%d overflows 64-bit nanoseconds", n)
		}
		return n * 1000, ""
	case pickle.KindFloat:
		f, _ := doc.Float(v)
		if f != math.Trunc(f) || f > most || f < -most {
			return 0, fmt.Sprintf("is the float %v, not a time in microseconds", f)
		}
		return int64(f) * 1000, ""
	}
	return 0, fmt.Sprintf("is a %s, not an integer", doc.Kind(v))
}
