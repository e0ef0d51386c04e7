package pickle

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// listTaker is a recorder whose handler takes the lists its entries
// make (ParallelLists), as the importer takes frames lists: a list is
// interned by what its items hold (a dict's pairs, or the item's kind),
// taken (Decoder.Take) when decoded sequentially, and rendered "S<id>";
// a ticket renders the same way. A chunk's list is rendered with its
// number in the chunk until Merge gives its id.
type listTaker struct {
	parRecorder
	dec  *Decoder
	ids  map[string]uint32
	took int // TakeList calls
	refs int // fetches taken unresolved (Doc.Ref)
	// listID: the lists the decoder makes itself go through
	// Decoder.ListID (its cache of ids), not straight to intern.
	listID bool
}

func newListTaker(d *Decoder) *listTaker {
	return &listTaker{parRecorder: parRecorder{recorder: recorder{doc: d.Doc(), kinds: true}}, dec: d, ids: map[string]uint32{}}
}

// describe renders the items of a list as the id they are interned by.
func describe(doc *Doc, items []Value) string {
	var b strings.Builder
	for _, it := range items {
		if doc.Kind(it) != KindDict {
			b.WriteString(doc.Kind(it).String())
			b.WriteByte(';')
			continue
		}
		if _, ok := TicketID(it); ok {
			b.WriteString("ticket;")
			continue
		}
		doc.Pairs(it, func(k, v Value) bool {
			ks, _ := doc.Str(k)
			b.WriteString(ks)
			b.WriteByte('=')
			if s, ok := doc.Str(v); ok {
				b.WriteString(s)
			} else {
				x, _ := doc.Int(v)
				b.WriteString(strconv.FormatInt(x, 10))
			}
			b.WriteByte(',')
			return true
		})
		b.WriteString(";")
	}
	return b.String()
}

func (r *listTaker) intern(doc *Doc, items []Value) uint32 {
	key := describe(doc, items)
	id, ok := r.ids[key]
	if !ok {
		id = uint32(len(r.ids))
		r.ids[key] = id
	}
	return id
}

// render renders an entry's pairs; values go through value, or
// renderValue when it returns false.
func render(doc *Doc, kv []Value, value func(k string, v Value) (string, bool)) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := doc.Str(kv[i])
		s, ok := value(k, kv[i+1])
		if !ok {
			s = renderValue(doc, kv[i+1])
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(s)
		b.WriteByte(' ')
	}
	return b.String()
}

// renderValue renders a scalar or a ticket.
func renderValue(doc *Doc, v Value) string {
	if id, ok := TicketID(v); ok {
		return "S" + strconv.FormatUint(uint64(id), 10)
	}
	if str, ok := doc.Str(v); ok {
		return str + ":str"
	}
	x, _ := doc.Int(v)
	return strconv.FormatInt(x, 10) + ":" + doc.Kind(v).String()
}

func (r *listTaker) SetEntry(n uint32, kv []Value) error {
	doc := r.dec.Doc()
	r.entries[n] = render(doc, kv, func(_ string, v Value) (string, bool) {
		if _, ok := TicketID(v); ok || doc.Kind(v) != KindList {
			return "", false
		}
		var id uint32
		if r.listID {
			id = r.dec.ListID(r, v)
		} else {
			id = r.intern(doc, doc.Slice(v))
		}
		r.dec.Take(v, id)
		return "S" + strconv.FormatUint(uint64(id), 10), true
	})
	return nil
}

// chunkTaker records a chunk's entries; "\x00" stands for the id of the
// chunk's list numbered in lists, and "\x01" for the value of the fetch
// numbered in refs (taken under the key "frames" only), in order.
type chunkTaker struct {
	recorder
	lists, refs [][]uint32
}

func (c *chunkTaker) NewEntry(n uint32, off int) {
	c.recorder.NewEntry(n, off)
	c.lists = append(c.lists, nil)
	c.refs = append(c.refs, nil)
}

func (c *chunkTaker) SetEntry(n uint32, kv []Value) error {
	deferred := false
	c.entries[n] = render(c.doc, kv, func(k string, v Value) (string, bool) {
		if id, ok := c.doc.RefList(v); ok {
			c.lists[n] = append(c.lists[n], id)
			return "S\x00", true
		}
		if r, ok := c.doc.Ref(v); ok {
			deferred = deferred || k != "frames"
			c.refs[n] = append(c.refs[n], r)
			return "\x01", true
		}
		if c.doc.Kind(v) == KindList {
			return "a list not taken", true
		}
		return "", false
	})
	if deferred {
		return ErrDeferEntry
	}
	return nil
}

func (r *listTaker) Fork(off, _ int) func(*Doc) EntryHandler {
	return func(doc *Doc) EntryHandler { return &chunkTaker{recorder: recorder{doc: doc}} }
}

func (r *listTaker) Merge(h EntryHandler, from, to int, first uint32, end int, m *ChunkMap) error {
	c := h.(*chunkTaker)
	if int(first) != len(r.entries) {
		return fmt.Errorf("merge at entry %d after %d", first, len(r.entries))
	}
	for i := from; i < to; i++ {
		e := c.entries[i]
		for _, id := range c.lists[i] {
			e = strings.Replace(e, "\x00", fmt.Sprint(m.Lists[id]), 1)
		}
		for _, ref := range c.refs[i] {
			e = strings.Replace(e, "\x01", renderValue(r.dec.Doc(), m.Refs[ref]), 1)
		}
		r.entries = append(r.entries, e)
		r.refs += len(c.refs[i])
	}
	r.merges++
	return nil
}

func (r *listTaker) TakeList(items []Value) uint32 {
	r.took++
	return r.intern(r.dec.Doc(), items)
}

// stackSnapshot returns a snapshot of n entries shaped as PyTorch writes
// them with call stacks, with the edges a frames list may have: frame
// dicts memoized in the segments, and new ones first met anywhere in the
// trace (inside a list, before other items); lists of one item (APPEND),
// of none, and of several (MARK APPENDS); items fetched with BINGET and
// LONG_BINGET; a free_completed fetching its free_requested's list, from
// an entry just before or far before; FRAME opcodes between any two of a
// list's items; a new "N/A" in every entry.
func stackSnapshot(n int, seed uint64) pk {
	p, _, _ := stackSnapshotMemo(n, seed)
	return p
}

// stackSnapshotMemo is stackSnapshot, with the memo's length at its end
// and how every entry starts (EMPTY_DICT MEMOIZE MARK and "action"
// fetched: what the workers' chunks start at).
func stackSnapshotMemo(n int, seed uint64) (pk, int, pk) {
	rng := rand.New(rand.NewPCG(seed, 0))
	memo := 0
	memoize := func(p pk) pk { memo++; return p.op(opMemoize) }
	get := func(p pk, i int) pk {
		if i < 256 && rng.IntN(4) > 0 {
			return p.op(opBinGet, byte(i))
		}
		return p.op(opLongBinGet, byte(i), byte(i>>8), byte(i>>16), byte(i>>24))
	}
	frame := func(p pk) pk {
		if rng.IntN(40) == 0 {
			return p.op(opFrame, 0, 0, 1, 0, 0, 0, 0, 0)
		}
		return p
	}
	p := pk{opProto, 4}
	p = memoize(p.op(opEmptyDict)).op(opMark)
	p = memoize(p.str("segments"))
	p = memoize(p.op(opEmptyList))
	keys := map[string]int{}
	key := func(p pk, s string) pk {
		if i, ok := keys[s]; ok {
			if s == "action" {
				return p.op(opLongBinGet, byte(i), byte(i>>8), byte(i>>16), byte(i>>24))
			}
			return get(p, i)
		}
		keys[s] = memo
		return memoize(p.str(s))
	}
	frames := make([]int, 60) // memo index of each frame's dict, or 0
	newFrame := func(p pk, f int) pk {
		frames[f] = memo
		p = memoize(p.op(opEmptyDict)).op(opMark)
		p = key(p, "name")
		p = memoize(p.str(fmt.Sprintf("fn%d", f)))
		p = key(p, "filename")
		p = memoize(p.str(fmt.Sprintf("/src/file%d.py", f%7)))
		p = key(p, "line")
		return p.op(opBinInt1, byte(f), opSetItems)
	}
	// The segments' blocks hold the first few frames.
	p = p.op(opMark)
	for f := range 5 {
		p = newFrame(p, f)
	}
	p = p.op(opAppends)
	p = key(p, "device_traces")
	p = memoize(p.op(opEmptyList))
	p = memoize(p.op(opEmptyList)).op(opMark)
	var lists []int // memo indexes of free_requested lists not yet completed
	for i := range n {
		if i%100 == 99 {
			p = p.op(opAppends, opMark)
		}
		p = memoize(p.op(opEmptyDict)).op(opMark)
		action := []string{"alloc", "free_requested", "free_completed"}[i%3]
		switch {
		case i < 3:
			action = "alloc"
		case i >= n/2 && i%7 == 0:
			// An action first met halfway, then fetched: other chunks
			// leave its entries to the decoder.
			action = "segment_map"
		}
		p = key(p, "action")
		p = key(p, action)
		p = key(p, "addr").long(uint64(1<<40 + i*512))
		p = key(p, "frames")
		switch {
		case action == "segment_map":
			p = p.op(opNone)
		case action == "free_completed" && len(lists) > 0:
			j := len(lists) - 1
			if rng.IntN(5) == 0 {
				j = rng.IntN(len(lists))
			}
			p = get(p, lists[j])
			lists = append(lists[:j], lists[j+1:]...)
		default:
			if action == "free_requested" {
				lists = append(lists, memo)
			}
			p = memoize(p.op(opEmptyList))
			depth := rng.IntN(5)
			if depth > 1 {
				p = p.op(opMark)
			}
			// New frames are met less and less often, none after
			// entry 550.
			for range depth {
				f := rng.IntN(min(len(frames), 5+i/10))
				if frames[f] == 0 {
					p = newFrame(p, f)
				} else {
					p = get(p, frames[f])
				}
				p = frame(p)
				if depth == 1 {
					p = p.op(opAppend)
				}
			}
			if depth > 1 {
				p = p.op(opAppends)
			}
		}
		p = key(p, "compile_context")
		p = memoize(p.str("N/A"))
		p = p.op(opSetItems)
	}
	a := keys["action"]
	return p.op(opAppends, opAppend, opSetItems, opStop), memo, pk{opEmptyDict, opMemoize, opMark, opLongBinGet, byte(a), byte(a >> 8), 0, 0}
}

// decodeLists decodes data streamed to a listTaker, on workers when tune
// is set.
func decodeLists(data []byte, workers int, tune *ParallelTuning) (*listTaker, *Doc, ParallelStats, error) {
	return decodeListsVia(data, workers, tune, workers > 1)
}

// decodeListsVia is decodeLists, the decoder's own lists through
// Decoder.ListID when listID is set.
func decodeListsVia(data []byte, workers int, tune *ParallelTuning, listID bool) (*listTaker, *Doc, ParallelStats, error) {
	d := NewDecoder(data)
	d.Workers, d.Tuning = workers, tune
	r := newListTaker(d)
	r.listID = listID
	d.StreamEntries("device_traces", r)
	doc, err := d.DecodeDoc()
	return r, doc, d.ParallelStats(), err
}

// TestParallelLists checks that workers decode entries with frames lists
// (ParallelLists) to what the sequential decode gives: the same entries
// with the same stack ids, in the same order, the same values and strings
// kept, and the same error for cuts of the input; and that the
// workers took nine tenths of the entries after the launch, lists
// and all, though new frame dicts come in lists until entry 550 (the
// worker leaves each such entry to the decoder and goes on from the next:
// started after 10 entries in chunks of 64 KiB, the workers took 1,814 of
// the 2,990 entries when a chunk ended there).
func TestParallelLists(t *testing.T) {
	full := stackSnapshot(3000, 1)
	want, wdoc, _, werr := decodeLists(full, 1, nil)
	if werr != nil || len(want.entries) != 3000 {
		t.Fatalf("sequential: %d entries, %v", len(want.entries), werr)
	}
	if !strings.Contains(want.entries[1], "frames=S") || len(want.ids) < 50 {
		t.Fatalf("sequential: entry 1 is %q, %d stacks", want.entries[1], len(want.ids))
	}
	for _, tune := range []*ParallelTuning{{After: 200, ChunkBytes: 2000}, {After: 10, ChunkBytes: 300}, {After: 1000, ChunkBytes: 64 << 10}, {After: 10, ChunkBytes: 64 << 10}} {
		got, gdoc, st, gerr := decodeLists(full, 4, tune)
		if diff := sameDecode(&want.parRecorder, &got.parRecorder, wdoc, gdoc, werr, gerr); diff != "" {
			t.Fatalf("%+v: %s", *tune, diff)
		}
		if len(got.ids) != len(want.ids) {
			t.Errorf("%+v: %d stacks, sequential %d", *tune, len(got.ids), len(want.ids))
		}
		rest := int64(3000 - tune.After)
		if st.Entries < rest*9/10 || st.Lists == 0 || got.took == 0 || st.Refs == 0 || int64(got.refs) != st.Refs || st.Redone > rest/5 {
			t.Errorf("%+v: the workers decoded %d of %d entries; %d lists, %d taken; %d fetches, %d taken (%+v)", *tune, st.Entries, rest, st.Lists, got.took, st.Refs, got.refs, st)
		}
	}
	// Cuts every 53 bytes in the long pass (FRAGSIM_LONG=1, without the
	// race detector), every 211 in the everyday pass: the same decodes,
	// a quarter as many cuts (each cut decodes the snapshot so far twice).
	tune := &ParallelTuning{After: 10, ChunkBytes: 500}
	small := stackSnapshot(600, 4)
	step := 211
	if longTests() {
		step = 53
	}
	for cut := 1; cut < len(small); cut += step {
		want, wdoc, _, werr := decodeLists(small[:cut], 1, nil)
		got, gdoc, _, gerr := decodeLists(small[:cut], 3, tune)
		if diff := sameDecode(&want.parRecorder, &got.parRecorder, wdoc, gdoc, werr, gerr); diff != "" {
			t.Fatalf("cut at %d: %s", cut, diff)
		}
	}
}

// TestParallelListsLeft checks the lists a worker leaves to the decoder:
// an item memoized in the chunk itself or in the one before, an item
// that is not a container, a list fetched later that the handler did not
// take, frames fetched from a hole or from the entry itself,
// a hole in the memo, an index memoized later; each decode is the
// sequential one's, entries and error.
func TestParallelListsLeft(t *testing.T) {
	base, m, start := stackSnapshotMemo(600, 2)
	// Each entry starts as the workers look for, "action" fetched
	// ("alloc", then memo 1, "segments").
	entry := func() pk { return append(pk{}, start...).op(opBinGet, 1) }
	i := bytes.LastIndex(base, []byte{opAppends, opAppend})
	own := m + 2 // the entry's dict, its list, the frame dict
	for name, insert := range map[string]pk{
		// A frame dict made in the entry, fetched again as a second item.
		"own item": entry().str("frames").op(opEmptyList, opMemoize, opMark).
			op(opEmptyDict, opMemoize, opMark).str("name").str("f").op(opSetItems).op(opLongBinGet, byte(own), byte(own>>8), 0, 0, opAppends, opSetItems),
		// The entry before's "N/A", memoized in the same chunk, or in
		// one before.
		"string of the chunk": entry().str("frames").op(opEmptyList, opMemoize, opMark).
			op(opLongBinGet, byte(m-1), byte((m-1)>>8), 0, 0, opAppends, opSetItems),
		// A string as an item.
		"string item": entry().str("frames").op(opEmptyList, opMemoize, opBinGet, 1, opAppend, opSetItems),
		// A list inside a dict, fetched as frames by an entry far after.
		"list not taken": func() pk {
			e := entry().str("meta").op(opEmptyDict, opMemoize, opMark).str("l").
				op(opEmptyList, opMemoize, opBinInt1, 1, opAppend, opSetItems, opSetItems)
			list := m + 2
			for range 60 {
				e = append(e, entry().op(opSetItems)...)
			}
			e = append(e, entry().str("frames").op(opLongBinGet, byte(list), byte(list>>8), 0, 0, opSetItems)...)
			// Then a stack new to the trace (frame 0, memo 3, five
			// times): its id comes after the fetched list's.
			return append(e, entry().str("frames").op(opEmptyList, opMemoize, opMark).
				op(opBinGet, 3, opBinGet, 3, opBinGet, 3, opBinGet, 3, opBinGet, 3, opAppends, opSetItems)...)
		}(),
		// A list of frame 0 twice (memo 3), then frame 0's dict changed
		// (its "line" set again), then the same list far after: taken
		// again.
		"dict changed": func() pk {
			list := entry().str("frames").op(opEmptyList, opMemoize, opMark, opBinGet, 3, opBinGet, 3, opAppends, opSetItems)
			e := append(pk{}, list...)
			for range 30 {
				e = append(e, entry().op(opSetItems)...)
			}
			e = append(e, entry().str("x").op(opBinGet, 3, opMark).str("line").op(opBinInt1, 99, opSetItems, opSetItems)...)
			for range 60 {
				e = append(e, entry().op(opSetItems)...)
			}
			return append(e, list...)
		}(),
		// Frames fetched from an index never memoized, and from the
		// entry's own dict.
		"fetched hole": entry().str("frames").op(opLongBinGet, 0, 0, 0, 1, opSetItems),
		"fetched self": entry().str("frames").op(opLongBinGet, byte(m), byte(m>>8), 0, 0, opSetItems),
		// An index never memoized.
		"hole": entry().str("frames").op(opEmptyList, opMark, opLongBinGet, 0, 0, 0, 1, opAppends, opSetItems),
	} {
		data := append(append(append(pk{}, base[:i]...), insert...), base[i:]...)
		want, wdoc, _, werr := decodeLists(data, 1, nil)
		// Sequential, the decoder's lists through ListID.
		got, gdoc, _, gerr := decodeListsVia(data, 1, nil, true)
		if diff := sameDecode(&want.parRecorder, &got.parRecorder, wdoc, gdoc, werr, gerr); diff != "" {
			t.Fatalf("%s, ListID: %s", name, diff)
		}
		for _, tune := range []*ParallelTuning{{After: 10, ChunkBytes: 300}, {After: 100, ChunkBytes: 4000}} {
			got, gdoc, _, gerr := decodeLists(data, 3, tune)
			if diff := sameDecode(&want.parRecorder, &got.parRecorder, wdoc, gdoc, werr, gerr); diff != "" {
				t.Fatalf("%s, %+v: %s", name, *tune, diff)
			}
		}
	}
}
