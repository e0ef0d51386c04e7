package pickle

import (
	"fmt"
	"math"
	"strconv"
)

// Kind is the Python type of a value in a Doc.
type Kind uint8

// Value kinds.
const (
	KindNone Kind = iota
	KindBool
	KindInt   // int64
	KindUint  // an int in [2^63, 2^64)
	KindFloat // float64
	KindString
	KindList
	KindTuple
	KindDict
)

var kindNames = [...]string{"None", "bool", "int", "int", "float", "str", "list", "tuple", "dict", "dict", "list", "fetched"}

// String returns the Python type name.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Value is a value of a Doc: an index into its value table, or, with
// inlineBit set, a value held in the Value itself, which takes no table
// entry: a small non-negative int (most of a snapshot's ints), with strBit
// also set the index of a string, and with entryBit too a streamed entry
// (see Decoder.StreamEntries).
type Value uint32

// inlineBit marks a Value that holds an int below maxInline itself;
// inlineBit|strBit one that holds a string index below maxInlineStr;
// inlineBit|strBit|entryBit (tagMask) one that holds an entry number.
const (
	inlineBit    Value = 1 << 31
	strBit       Value = 1 << 30
	entryBit     Value = 1 << 29
	tagMask            = inlineBit | strBit | entryBit
	maxInline          = 1 << 30
	maxInlineStr       = 1 << 29
	// maxEntries bounds the entry numbers (so that no entry Value is ^0,
	// which callers use for "no value").
	maxEntries = 1<<29 - 1
)

// kindEntry is the kind of a streamed entry: a dict whose keys and values
// went to the EntryHandler (Kind reports it as a dict).
const kindEntry = KindDict + 1

// kindRefs is the kind, in a worker's chunk Doc, of a list the chunk made
// of values fetched from the memo as it was when the workers started (a
// snapshot's frames list of frame dicts; see ParallelLists): its bits are
// the list's number in the chunk (Doc.RefList). Kind reports it as a
// list, with no items.
const kindRefs = kindEntry + 1

// kindRef is the kind, in a worker's chunk Doc, of a value fetched from a
// memo index the worker does not know (memoized after the launch), when
// the handler is a ParallelLists: its bits are the fetch's number in the
// chunk (Doc.Ref).
const kindRef = kindRefs + 1

// kindIn is v's kind with the kind table kinds (the decoder's local copy).
func kindIn(kinds []Kind, v Value) Kind {
	if v&inlineBit != 0 {
		switch v & tagMask {
		case tagMask:
			return kindEntry
		case inlineBit | strBit:
			return KindString
		}
		return KindInt
	}
	return kinds[v]
}

// val returns v's kind and bits.
func (d *Doc) val(v Value) val {
	if v&inlineBit != 0 {
		switch v & tagMask {
		case tagMask:
			return val{x: uint64(v &^ tagMask), kind: kindEntry}
		case inlineBit | strBit:
			return val{x: uint64(v &^ (inlineBit | strBit)), kind: KindString}
		}
		return val{x: uint64(v &^ inlineBit), kind: KindInt}
	}
	return val{x: d.xs[v], kind: d.kinds[v]}
}

// strValue returns the Value of the string of index i.
func strValue(i uint32) (Value, bool) {
	if i < maxInlineStr {
		return inlineBit | strBit | Value(i), true
	}
	return 0, false
}

// Entry returns the number of the streamed entry v, if v is one.
func (d *Doc) Entry(v Value) (uint32, bool) {
	if v&tagMask == tagMask {
		return uint32(v &^ tagMask), true
	}
	return 0, false
}

type val struct {
	x    uint64 // the bits of a scalar, a string index, or where a container's items are
	kind Kind
}

// A list, tuple or dict holds item indexes (dicts hold keys and values
// alternately). Its bits say where: without chainedBit, in one run of the
// items table, start<<32 | count (0 when empty: the usual case, filled in
// one go, costs no more); with chainedBit, in a chain of chunks,
// first<<32 | chainedBit | last.
const (
	chainedBit = 1 << 31
	lowMask    = chainedBit - 1
)

type chunk struct {
	start, n uint32
	next     int32
	// entries marks a chunk of streamed entries, the n from entry number
	// start on, which take no room in the items table (a snapshot's
	// device lists: 4 bytes an entry otherwise).
	entries bool
}

// Doc is a decoded pickle held in flat, pointer-free tables, so that
// decoding millions of small dicts costs neither allocations nor garbage
// collection. Values are addressed by Value.
type Doc struct {
	kinds  []Kind   // the value table: kinds[v] and xs[v] (two tables, so
	xs     []uint64 // that a value costs 9 bytes, not a padded 16)
	strs   []string
	chunks []chunk
	items  []Value
	root   Value
	stop   int64 // byte offset of the STOP opcode that returned root
	intern map[string]uint32
	// A worker's chunk: the items of its lists of fetched values (see
	// RefList), and where each list's are (start<<32 | count).
	refs      []uint64 // a Value, or pendingRef and a memo index
	refLists  []uint64
	listSlots []uint32 // where its memo holds its lists
	pending   []uint64 // its fetches (see Ref): the memo index fetched (lowIdx), and the chunk's memo length before the entry <<32
	order     []uint32 // its lists (their numbers) and fetches (orderRef and their numbers), as met
}

// Root returns the pickle's top-level value.
func (d *Doc) Root() Value { return d.root }

// Kind returns v's kind (a streamed entry is a dict).
func (d *Doc) Kind(v Value) Kind {
	switch k := d.val(v).kind; k {
	case kindEntry:
		return KindDict
	case kindRefs:
		return KindList
	default:
		return k
	}
}

// RefList returns, in the Doc of a chunk decoded on a worker, the number
// in the chunk of the list v, if v is a list of fetched values that the
// decoder hands to ParallelLists.TakeList when it takes the chunk. Equal
// lists (the same values in the same order) have the same number;
// numbers start at 0, in the order the chunk first made each list.
func (d *Doc) RefList(v Value) (uint32, bool) { return d.numbered(v, kindRefs) }

// Ref returns, in the Doc of a chunk decoded on a worker whose handler is
// a ParallelLists, the number in the chunk of the value v, if v is a value
// fetched from the memo that the worker could not resolve (memoized after
// the launch, as a snapshot's free_requested's frames list is for the
// free_completed that fetches it). When the handler's SetEntry returns
// nil, the decoder gives the fetched value to Merge (ChunkMap.Refs),
// once it has checked that it was memoized before the entry and is not a
// list (one the handler has taken is its Ticket); ErrDeferEntry leaves
// the entry to the decoder. Numbers start at 0, in the chunk's order.
func (d *Doc) Ref(v Value) (uint32, bool) { return d.numbered(v, kindRef) }

// numbered returns the number a chunk's Doc keeps for v, if v is a value
// of kind k (kindRef or kindRefs).
func (d *Doc) numbered(v Value, k Kind) (uint32, bool) {
	if v&inlineBit != 0 || int(v) >= len(d.kinds) || d.kinds[v] != k {
		return 0, false
	}
	return uint32(d.xs[v]), true
}

// Int returns v as an int64: ints (uint64 ones bit-cast), bools and floats
// (truncated); ok is false for other kinds.
func (d *Doc) Int(v Value) (int64, bool) {
	x := d.val(v)
	switch x.kind {
	case KindInt, KindUint, KindBool:
		return int64(x.x), true
	case KindFloat:
		return int64(math.Float64frombits(x.x)), true
	}
	return 0, false
}

// Float returns v as a float64 (ints converted).
func (d *Doc) Float(v Value) (float64, bool) {
	x := d.val(v)
	switch x.kind {
	case KindFloat:
		return math.Float64frombits(x.x), true
	case KindInt, KindBool:
		return float64(int64(x.x)), true
	case KindUint:
		return float64(x.x), true
	}
	return 0, false
}

// Str returns v's string and whether v is a string (str or bytes).
func (d *Doc) Str(v Value) (string, bool) {
	x := d.val(v)
	if x.kind != KindString {
		return "", false
	}
	return d.strs[x.x], true
}

// StrID returns the index of v's string in the Doc's string table: equal
// short strings (up to 128 bytes) share one index.
func (d *Doc) StrID(v Value) (uint32, bool) {
	x := d.val(v)
	if x.kind != KindString {
		return 0, false
	}
	return uint32(x.x), true
}

// LookupStr returns the string-table index of s, if some short string of
// the Doc equals it.
func (d *Doc) LookupStr(s string) (uint32, bool) {
	i, ok := d.intern[s]
	return i, ok
}

// run returns a container's items when they lie in one run of the items
// table, else ok false and the index of the first chunk of their chain.
func (d *Doc) run(x uint64) (items []Value, first int32, ok bool) {
	if x&chainedBit == 0 {
		start, n := uint32(x>>32), uint32(x)&lowMask
		return d.items[start : start+n : start+n], 0, true
	}
	return nil, int32(x >> 32), false
}

// forRuns calls f with each run of a container's items, in order, until f
// returns false.
func (d *Doc) forRuns(x uint64, f func(items []Value) bool) {
	items, c, ok := d.run(x)
	if ok {
		f(items)
		return
	}
	var buf []Value
	for ; c >= 0; c = d.chunks[c].next {
		ch := d.chunks[c]
		if !ch.entries {
			if !f(d.items[ch.start : ch.start+ch.n]) {
				return
			}
			continue
		}
		if buf == nil {
			buf = make([]Value, min(ch.n, 4096))
		}
		for i := uint32(0); i < ch.n; {
			k := min(ch.n-i, uint32(len(buf)))
			for j := range k {
				buf[j] = tagMask | Value(ch.start+i+j)
			}
			if !f(buf[:k]) {
				return
			}
			i += k
		}
	}
}

// EntryRuns calls f with each run of consecutive streamed entries (see
// Decoder.StreamEntries) the list v holds, as the first entry's number and
// the count, in order, until f returns false; it reports false, calling f
// for none, when v is not a list or holds anything else. A snapshot's
// device lists are read this way without a Value made for each entry.
func (d *Doc) EntryRuns(v Value, f func(first, n uint32) bool) bool {
	x := d.val(v)
	if x.kind != KindList {
		return false
	}
	if x.x == 0 {
		return true // empty
	}
	items, c, ok := d.run(x.x)
	if !ok {
		for ; c >= 0; c = d.chunks[c].next {
			if !d.chunks[c].entries {
				return false
			}
		}
		for c = int32(x.x >> 32); c >= 0; c = d.chunks[c].next {
			if !f(d.chunks[c].start, d.chunks[c].n) {
				break
			}
		}
		return true
	}
	for _, it := range items {
		if it&tagMask != tagMask {
			return false
		}
	}
	for i := 0; i < len(items); {
		j := i + 1
		for j < len(items) && items[j] == items[j-1]+1 {
			j++
		}
		if !f(uint32(items[i]&^tagMask), uint32(j-i)) {
			break
		}
		i = j
	}
	return true
}

// Len returns the number of items of a list or tuple, or pairs of a dict.
func (d *Doc) Len(v Value) int {
	x := d.val(v)
	switch x.kind {
	case KindList, KindTuple, KindDict:
	default:
		return 0
	}
	n := 0
	d.forRuns(x.x, func(items []Value) bool { n += len(items); return true })
	if x.kind == KindDict {
		n /= 2
	}
	return n
}

// Items calls f with each item of a list or tuple, in order, until f
// returns false.
func (d *Doc) Items(v Value, f func(i int, item Value) bool) {
	x := d.val(v)
	if x.kind != KindList && x.kind != KindTuple {
		return
	}
	i := 0
	d.forRuns(x.x, func(items []Value) bool {
		for _, it := range items {
			if !f(i, it) {
				return false
			}
			i++
		}
		return true
	})
}

// Slice returns the items of a list or tuple.
func (d *Doc) Slice(v Value) []Value {
	x := d.val(v)
	if x.kind != KindList && x.kind != KindTuple {
		return nil
	}
	if items, _, ok := d.run(x.x); ok {
		return items
	}
	n := 0
	d.forRuns(x.x, func(items []Value) bool { n += len(items); return true })
	out := make([]Value, 0, n)
	if n >= 1<<18 {
		Prefault(spare(out))
	}
	d.forRuns(x.x, func(items []Value) bool { out = append(out, items...); return true })
	return out
}

// Pairs calls f with each key and value of a dict, in the order they were
// set (a key set twice appears twice; the later value is Python's), until
// f returns false.
func (d *Doc) Pairs(v Value, f func(key, value Value) bool) {
	x := d.val(v)
	if x.kind != KindDict {
		return
	}
	d.forRuns(x.x, func(its []Value) bool {
		for i := 0; i+1 < len(its); i += 2 {
			if !f(its[i], its[i+1]) {
				return false
			}
		}
		return true
	})
}

// Get returns the value a dict holds under the string key.
func (d *Doc) Get(v Value, key string) (Value, bool) {
	var out Value
	found := false
	d.Pairs(v, func(k, val Value) bool {
		if s, ok := d.Str(k); ok && s == key {
			out, found = val, true
		}
		return true
	})
	return out, found
}

// PairSlice returns a dict's keys and values, alternating, without copying
// when the dict was filled in one go (the usual case).
func (d *Doc) PairSlice(v Value) []Value {
	x := d.val(v)
	if x.kind != KindDict {
		return nil
	}
	if items, _, ok := d.run(x.x); ok {
		return items
	}
	var out []Value
	d.Pairs(v, func(k, val Value) bool { out = append(out, k, val); return true })
	return out
}

// StrAt returns the string of index i of the Doc's string table (a StrID).
func (d *Doc) StrAt(i uint32) string { return d.strs[i] }

// NumValues returns the size of the Doc's value table (inline values,
// such as small ints, most strings and streamed entries, take no entry).
func (d *Doc) NumValues() int { return len(d.kinds) }

// NumStrings returns the size of the Doc's string table (StrID < NumStrings).
func (d *Doc) NumStrings() int { return len(d.strs) }

// maxDepth bounds the nesting ToAny follows (pickles may hold cycles).
const maxDepth = 1000

// ToAny converts v to the Go representation of the package doc (*Dict,
// *List, Tuple, ...), preserving shared containers. It fails on nesting
// deeper than 1000 (which includes cyclic values) with a *Error at the
// STOP opcode.
func (d *Doc) ToAny(v Value) (any, error) {
	seen := map[Value]any{}
	return d.toAny(v, seen, 0)
}

func (d *Doc) toAny(v Value, seen map[Value]any, depth int) (any, error) {
	if depth > maxDepth {
		return nil, &Error{Offset: d.stop, Op: opStop, Msg: fmt.Sprintf("the value it returns nests deeper than %d (or is cyclic)", maxDepth), Err: ErrMalformed}
	}
	x := d.val(v)
	switch x.kind {
	case KindNone:
		return nil, nil
	case KindBool:
		return x.x != 0, nil
	case KindInt:
		return int64(x.x), nil
	case KindUint:
		return x.x, nil
	case KindFloat:
		return math.Float64frombits(x.x), nil
	case KindString:
		return d.strs[x.x], nil
	}
	if got, ok := seen[v]; ok {
		return got, nil
	}
	switch x.kind {
	case KindList, KindTuple:
		items := make([]any, 0, d.Len(v))
		var out any
		if x.kind == KindList {
			l := &List{}
			seen[v] = l
			out = l
		}
		var err error
		d.Items(v, func(_ int, it Value) bool {
			var a any
			a, err = d.toAny(it, seen, depth+1)
			items = append(items, a)
			return err == nil
		})
		if err != nil {
			return nil, err
		}
		if x.kind == KindTuple {
			t := Tuple(items)
			seen[v] = t
			return t, nil
		}
		out.(*List).Items = items
		return out, nil
	case KindDict:
		dict := &Dict{Pairs: make([]Pair, 0, d.Len(v))}
		seen[v] = dict
		var err error
		d.Pairs(v, func(k, val Value) bool {
			var key string
			switch kx := d.val(k); kx.kind {
			case KindString:
				key = d.strs[kx.x]
			case KindInt:
				key = strconv.FormatInt(int64(kx.x), 10)
			case KindUint:
				key = strconv.FormatUint(kx.x, 10)
			}
			var a any
			a, err = d.toAny(val, seen, depth+1)
			dict.Set(key, a)
			return err == nil
		})
		if err != nil {
			return nil, err
		}
		return dict, nil
	}
	return nil, &Error{Offset: d.stop, Op: opStop, Msg: fmt.Sprintf("bad value kind %d", x.kind), Err: ErrMalformed}
}
