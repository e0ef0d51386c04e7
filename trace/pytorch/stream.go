package pytorch

import (
	"errors"
	"math"
	"strconv"
	"unsafe"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// errFallback says that a streamed decode met something the streaming
// path does not follow; the snapshot is then decoded again as a whole.
var errFallback = errors.New("the snapshot's entries cannot be streamed")

// Entry keys, numbered from 1 (0: a key the import ignores), and the bits
// of event.set that say which were set.
const (
	keyAction = 1 + iota
	keyAddr
	keySize
	keyStream
	keyTime
	keyFrames
	keyDeviceFree
	keyUserMetadata
	keyOther // computed: not an entry key

	setTimeOK = 1 << 15 // time_us held a number
)

func entryKey(s string) uint8 {
	switch s {
	case "action":
		return keyAction
	case "addr":
		return keyAddr
	case "size":
		return keySize
	case "stream":
		return keyStream
	case "time_us":
		return keyTime
	case "frames":
		return keyFrames
	case "device_free":
		return keyDeviceFree
	case "user_metadata":
		return keyUserMetadata
	}
	return keyOther
}

// streamer turns the trace entries of a snapshot into events while the
// pickle decoder meets them (pickle.EntryHandler): an entry costs its
// event, not a tree of decoded values. Its events are in the order the
// entries were created; the device lists say which events each device has.
type streamer struct {
	doc     *pickle.Doc
	evs     []event
	keyOf   []uint8           // string index -> entry key, 0 when not yet known
	kindOf  []uint8           // string index -> action kind + 1 (1: unknown), 0 when not yet known
	unknown map[uint32]string // entry -> its action when not one the import knows
	size    int               // the input's size
	first   int               // the first entry's offset

	prepareAt int    // the offset from which to call prepare
	prepare   func() // see Options.prepare
}

// NewEntry starts entry n's event; off is where its dict starts.
func (s *streamer) NewEntry(n uint32, off int) {
	if off >= s.prepareAt {
		s.prepareAt = math.MaxInt
		s.prepare()
	}
	if len(s.evs) == cap(s.evs) {
		s.reserve(off)
	}
	s.evs = append(s.evs, event{frames: noFrames})
}

// reserve grows the events for the entries the rest of the input holds at
// the rate seen so far (plus a tenth), so that they are neither copied
// again and again as they grow nor much larger than needed (a million
// entries are 56 MB of events).
func (s *streamer) reserve(off int) {
	n := len(s.evs)
	if n == 0 {
		s.first = off
		s.evs = make([]event, 0, 4096)
		return
	}
	want, est := n+n/4, 0
	if off > s.first {
		est = int(float64(s.size-off) * float64(n) / float64(off-s.first))
		want = max(want, n+est+est/10+1024)
	}
	evs := make([]event, n, want)
	if est >= 1<<15 {
		// Faulted in ahead, up to the estimate (the margin only if used).
		pickle.Prefault(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(evs[n:]))), uintptr(est)*unsafe.Sizeof(event{})))
	}
	copy(evs, s.evs)
	s.evs = evs
}

// grow extends the string-index caches to the strings decoded so far.
func (s *streamer) grow(id uint32) {
	n := max(s.doc.NumStrings(), int(id)+1)
	s.keyOf = append(s.keyOf, make([]uint8, n-len(s.keyOf))...)
	s.kindOf = append(s.kindOf, make([]uint8, n-len(s.kindOf))...)
}

// SetEntry stores the keys and values set on entry n in its event. A key
// set twice sends the snapshot to the general path (which keeps Python's
// last-value semantics for every field).
func (s *streamer) SetEntry(n uint32, kv []pickle.Value) error {
	doc := s.doc
	e := &s.evs[n]
	for i := 0; i+1 < len(kv); i += 2 {
		id, ok := doc.StrID(kv[i])
		if !ok {
			continue
		}
		if int(id) >= len(s.keyOf) {
			s.grow(id)
		}
		k := s.keyOf[id]
		if k == 0 {
			str, _ := doc.Str(kv[i])
			k = entryKey(str)
			s.keyOf[id] = k
		}
		if k == keyOther {
			continue
		}
		bit := uint16(1) << (k - 1)
		if e.set&bit != 0 {
			return errFallback
		}
		e.set |= bit
		v := kv[i+1]
		switch k {
		case keyAction:
			s.action(n, e, v)
		case keyAddr:
			if e.Kind != trace.KindOOM { // an OOM's Addr is its device_free
				x, _ := doc.Int(v)
				e.Addr = uint64(x)
			}
		case keySize:
			x, _ := doc.Int(v)
			e.SizeBytes = uint64(x)
		case keyStream:
			x, _ := doc.Int(v)
			e.Stream = trace.StreamID(x)
		case keyTime:
			if x, ok := doc.Int(v); ok {
				e.TimeNS = x * 1000
				e.set |= setTimeOK
			}
		case keyFrames:
			if doc.Kind(v) == pickle.KindList {
				e.frames = v // a container: it stays valid
			}
		case keyDeviceFree:
			// Kept in Addr for an OOM, which has no address: the action
			// must come first (PyTorch writes it first).
			if e.set&(1<<(keyAction-1)) == 0 {
				return errFallback
			}
			if e.Kind == trace.KindOOM {
				x, _ := doc.Int(v)
				e.Addr = uint64(x)
			}
		case keyUserMetadata:
			if sid, ok := doc.StrID(v); ok {
				e.text = int32(sid) + 1
			}
		}
	}
	return nil
}

// action sets e's kind from the action value v (KindInvalid for an
// action the import does not know, whose name is kept aside).
func (s *streamer) action(n uint32, e *event, v pickle.Value) {
	doc := s.doc
	id, ok := doc.StrID(v)
	if ok {
		if int(id) >= len(s.kindOf) {
			s.grow(id)
		}
		k := s.kindOf[id]
		if k == 0 {
			str, _ := doc.Str(v)
			k = 1
			if kind, known := actionKinds[str]; known {
				k = uint8(kind) + 1
			}
			s.kindOf[id] = k
		}
		if k > 1 {
			e.Kind = trace.Kind(k - 1)
			if e.Kind == trace.KindOOM {
				e.Addr = 0 // until device_free
			}
			return
		}
	}
	e.Kind = trace.KindInvalid
	if s.unknown == nil {
		s.unknown = map[uint32]string{}
	}
	s.unknown[n], _ = doc.Str(v)
}

// streamEntries is entries for a streamed decode: device_traces must be
// a list of lists of streamed entries, each list the entries created next,
// in order (as every snapshot PyTorch writes is). Anything else returns
// errFallback.
func (c *converter) streamEntries() ([][]event, error) {
	doc, st := c.doc, c.stream
	if doc.Kind(c.traces) != pickle.KindList {
		return nil, errFallback
	}
	lists := doc.Slice(c.traces)
	sum := &c.snap.summary
	perDev := make([][]event, len(lists))
	next := 0
	for dev, l := range lists {
		if doc.Kind(l) != pickle.KindList {
			return nil, errFallback
		}
		items := doc.Slice(l)
		first := next
		if len(items) > 0 {
			n, ok := doc.Entry(items[0])
			if !ok || int(n) < next {
				return nil, errFallback
			}
			first = int(n)
		}
		for k, it := range items {
			if n, ok := doc.Entry(it); !ok || int(n) != first+k {
				return nil, errFallback
			}
		}
		next = first + len(items)
		evs := st.evs[first:next:next]
		counts := map[string]int{}
		var byKind [trace.NumKinds]int
		var lastTime int64
		w := 0
		for k := range evs {
			e := evs[k]
			if e.set&setTimeOK != 0 {
				lastTime = e.TimeNS
			}
			e.TimeNS = lastTime
			e.Device = trace.DeviceID(dev)
			if e.set&(1<<(keyAction-1)) == 0 || e.Kind == trace.KindInvalid {
				name := "(none)"
				if e.set&(1<<(keyAction-1)) != 0 {
					name = st.unknown[uint32(first+k)]
				}
				counts[name]++
				if sum.UnknownActs == nil {
					sum.UnknownActs = map[string]int{}
				}
				sum.UnknownActs[name]++
				continue
			}
			byKind[e.Kind]++
			meta := e.text
			e.text, e.set = 0, 0
			if e.frames != noFrames && doc.Len(e.frames) == 0 {
				e.frames = noFrames
			}
			switch e.Kind {
			case trace.KindSnapshot:
				e.Addr = 0
			case trace.KindMarker:
				e.Marker = trace.MarkerText
				text := "annotate"
				if meta > 0 {
					if md := doc.StrAt(uint32(meta - 1)); md != "" {
						text += " " + md
					}
				}
				e.text = c.snap.text(text)
			}
			evs[w] = e
			w++
		}
		for name, k := range actionKinds {
			if n := byKind[k]; n > 0 {
				counts[name] += n
			}
		}
		sum.Actions[strconv.Itoa(dev)] = counts
		perDev[dev] = evs[:w:w]
	}
	if c.opt.Progress != nil {
		c.opt.Progress("convert", int64(next), int64(next))
	}
	return perDev, nil
}
