package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unsafe"
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

// consumedEvery is how often DecodeDoc calls Decoder.Consumed.
const consumedEvery = 16 << 20

// sampleBytes is how much input DecodeDoc decodes before sizing its
// tables for the rest, when it does not stream entries.
const sampleBytes = 4 << 20

// streamValues, streamItems and streamChunks are the tables' first sizes
// in a streamed decode (see sizeTables). When the items have outgrown
// theirs and still grow between streamSampleBytes and twice that of
// input, they grow with the entries (a snapshot with call stacks that
// memoizes new frame dicts for every entry keeps each entry's frames list
// and frame dicts), and the table is sized for the rest of the input at
// that rate (reserveMore), as a decode of the whole tree sizes its tables
// at sampleBytes. (Grown by appending, 100,000 entries with 8-frame
// stacks made 140 MB of items tables, faulted in page by page: most of a
// 20 MB snapshot's import on the development VM.) The values are not
// sized so: streaming, their table is cut back to what is kept after each
// entry, and its length at a sample says little (a 2M-entry snapshot whose
// frames the memo shares would have had 12 MB of them for nothing).
const (
	streamValues      = 4096
	streamItems       = 16384
	streamChunks      = 64
	streamSampleBytes = 1 << 20
)

// initialBytes is how much input NewDecoder sizes the tables for.
const initialBytes = 256 << 10

// reserve grows s's capacity to what the whole input needs if the first
// pos bytes needed len(s).
func reserve[T any](s []T, pos, total int) []T {
	return withRoom(s, int(float64(len(s))/float64(pos)*float64(total)*1.2)+1024)
}

// withRoom returns s, or a copy of it with room for want values when it
// has less, the room faulted in on another core.
func withRoom[T any](s []T, want int) []T {
	if want <= cap(s) {
		return s
	}
	t := make([]T, 0, want)
	Prefault(spare(t)) // before the copy, so that it faults in huge pages
	return append(t, s...)
}

// reserveMore grows s's capacity to what the rest of the input needs (rest
// bytes) if it grows as it did from length was over the last span bytes;
// s is left as it is when it has not outgrown first, its first size.
func reserveMore[T any](s []T, was int, span float64, rest, first int) []T {
	if len(s) <= first || len(s) <= was {
		return s
	}
	return withRoom(s, len(s)+int(float64(len(s)-was)/span*float64(rest)*1.2)+1024)
}

// MaxInputBytes is the largest pickle DecodeDoc accepts. (The tables it
// decodes into are addressed by 32-bit indexes: a pickle that would fill
// one fails with an error saying so, at the offset where it would.)
const MaxInputBytes int64 = 64 << 30

// maxValues and maxItems bound the value, string and chunk tables and
// the items table.
const (
	maxValues = 1<<31 - 1
	maxItems  = min(1<<32-1, math.MaxInt)
)

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
// deeper than 1000 (which includes cyclic values).
func (d *Doc) ToAny(v Value) (any, error) {
	seen := map[Value]any{}
	return d.toAny(v, seen, 0)
}

func (d *Doc) toAny(v Value, seen map[Value]any, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: values nested deeper than %d (or cyclic)", ErrMalformed, maxDepth)
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
	return nil, fmt.Errorf("%w: bad value kind %d", ErrMalformed, x.kind)
}

// Decode decodes the pickle in data into the package's Go representation.
func Decode(data []byte) (any, error) {
	doc, err := NewDecoder(data).DecodeDoc()
	if err != nil {
		return nil, err
	}
	return doc.ToAny(doc.Root())
}

// Limits on interning: short strings are shared so that a snapshot's
// repeated keys and file names cost one table entry each.
const (
	internMaxLen     = 128
	internMaxEntries = 1 << 20
)

// maxMemoGap bounds how far past the memo's end a PUT may store before the
// decoder switches to a map (so a hostile index cannot force a huge slice).
const maxMemoGap = 1 << 16

const memoHole = ^Value(0)

// Decoder decodes one pickle held in memory.
type Decoder struct {
	data   []byte
	pos    int
	doc    *Doc
	stack  []Value
	marks  []int
	memo   []Value // memo entries from memoBase on (see memo.go)
	sparse map[uint64]Value

	memoBase   uint64      // the memo index of memo[0]
	memoOld    []memoBlock // the memo entries below memoBase
	memoShift  uint8       // memoOld's blocks hold 2^memoShift entries
	compactAt  int         // the memo length from which it is compacted
	checkEvery int         // bytes between compactions and limit checks (consumedEvery)
	maxValues  int         // the value, string and chunk tables' limit (maxValues)
	maxItems   int         // the items table's limit (maxItems)

	// keep is how much of the value table something may still refer to
	// (the memo, a container's items): the values of a streamed entry
	// above it are dropped once the entry has them.
	keep int

	// strCache holds recent short strings and their string indexes.
	strCache [256]struct {
		s  string
		id uint32
		ok bool
	}

	// Streaming (see StreamEntries).
	entries   EntryHandler
	entryKey  string
	outer     Value  // the list stored under entryKey, or noValue
	cur       Value  // the latest list created as an item of outer, or noValue
	nEntries  uint32 // entries created
	lastEntry Value  // the latest entry created
	lastPos   int    // its stack position, or -1 once it may be elsewhere
	lastLen   int    // the value table's length when it was created
	lastKeep  int    // keep, the items' and the memo's length then
	lastItems int
	lastMemo  uint64
	takes     []take  // what the handler took of the entry being set (Take)
	kv        []Value // fastEntry's pairs
	noFast    bool    // decode every entry through the general path (tests)

	// Workers, when above 1 and the handler is a ParallelHandler, is how
	// many goroutines decode entries ahead of the decoder (see
	// parallel.go).
	Workers   int
	par       *parallel
	launched  bool
	allAtOnce bool // the workers start all at once (see ParallelReady)
	parStats  ParallelStats
	redoer    *redoer // redo's scratch state
	// taken holds the ids ParallelLists.TakeList gave lists of the
	// decoder's Values, by the Values' bytes, while no dict below
	// takenBelow (the values then) changes.
	taken      map[string]uint32
	takenBelow int
	Tuning     *ParallelTuning // nil: the defaults

	// Progress, when set, is called about every ProgressEvery bytes
	// with the offset reached and the input's size.
	Progress      func(done, total int64)
	ProgressEvery int64

	// Consumed, when set, is called about every 16 MiB of input with the
	// offset reached: the decoder no longer reads the input before it
	// (nothing decoded refers to the input's bytes), so a caller may
	// release that part of a mapped file.
	Consumed func(off int)
}

// noValue stands for "no value" in the decoder's streaming state.
const noValue = ^Value(0)

// NewDecoder returns a decoder of data.
func NewDecoder(data []byte) *Decoder {
	// The memo is sized for the first initialBytes of input, the tables
	// by DecodeDoc (see sizeTables).
	n := min(len(data), initialBytes)
	d := &Decoder{
		data: data,
		doc: &Doc{
			intern: make(map[string]uint32, 1024),
		},
		memo:       make([]Value, 0, n/8+16),
		stack:      make([]Value, 0, 1024),
		outer:      noValue,
		cur:        noValue,
		memoShift:  memoBlockShift,
		compactAt:  memoCompactAt,
		checkEvery: consumedEvery,
		maxValues:  maxValues,
		maxItems:   maxItems,
		lastEntry:  noValue,
		lastPos:    -1,
	}
	return d
}

// sizeTables makes the Doc's tables when DecodeDoc starts. Decoding a
// whole tree, they are sized for the first initialBytes of input, then
// for the whole input from what its first sampleBytes used, so that they
// neither grow by copying nor are zeroed in vain. Streaming, entries'
// scalars reuse their table entries: what else a snapshot holds (its
// segments and blocks, its settings) took 710 to 3,000 values and 3,900
// to 16,400 items in the 16 real snapshots, and the tables grow when
// they need. (Sized for the input, a small snapshot's import spent
// a third of its time zeroing and faulting in tables it did not use; for
// its first 256 KiB, 0.6 MB of them, against 0.1 MB now.)
func (d *Decoder) sizeTables() {
	doc := d.doc
	if doc.kinds != nil {
		return
	}
	n := min(len(d.data), initialBytes)
	nv, ni, nc := n/8+16, n/4+16, n/64+16
	if d.entries != nil {
		nv, ni, nc = min(nv, streamValues), min(ni, streamItems), min(nc, streamChunks)
	}
	doc.kinds = make([]Kind, 0, nv)
	doc.xs = make([]uint64, 0, nv)
	doc.items = make([]Value, 0, ni)
	doc.chunks = make([]chunk, 0, nc)
}

// EntryHandler receives the entries of a streamed list of lists of dicts
// (see Decoder.StreamEntries) while DecodeDoc runs.
type EntryHandler interface {
	// NewEntry is called when entry n (0, 1, 2...) is created, empty, by
	// the opcode at byte offset off of the input.
	NewEntry(n uint32, off int)
	// SetEntry is called with keys and values set on entry n (keys and
	// values alternate; keys are str or int), in the order the pickle sets
	// them. Its scalar Values are valid only during the call (the decoder
	// reuses their table entries); container Values stay valid.
	SetEntry(n uint32, kv []Value) error
}

// ErrNotStreamable is returned by DecodeDoc, when streaming, for an entry
// set in a way the handler is not given (an odd number of items, a key that
// is neither str nor int, more than 2^29-1 entries): the caller decodes
// the pickle again without streaming, which gives the data or the precise
// error. (An error of the handler's is returned as it is; other errors are
// the decoder's usual ones.)
var ErrNotStreamable = errors.New("pickle: the entries cannot be streamed")

// ErrDeferEntry is returned by the SetEntry of a chunk's handler (see
// ParallelLists) for an entry with a fetch the worker could not resolve
// (Doc.Ref) under a key whose value the handler needs: the decoder then
// decodes the entry itself.
var ErrDeferEntry = errors.New("pickle: entry left to the decoder")

// StreamEntries makes DecodeDoc hand the dicts created as items of the
// lists that are items of the list stored under key in the top-level dict
// (a memory snapshot's device_traces: one list of entry dicts per device)
// to h instead of storing them: such a dict is held in the Doc as an entry
// Value (Doc.Entry gives its number; Kind says dict, but it has no pairs),
// its keys and values go to h.SetEntry, and the values, once h has them,
// take no memory. Containers that hold entries may be read as usual; an
// entry used where its pairs would be needed (Doc.ToAny fails on it) is
// the caller's to detect, by decoding again without streaming.
func (d *Decoder) StreamEntries(key string, h EntryHandler) {
	d.entries, d.entryKey = h, key
}

// Doc returns the Doc being decoded (an EntryHandler reads its values).
func (d *Decoder) Doc() *Doc { return d.doc }

// inCtx reports whether a value pushed now would be an item of x: x is on
// top of the stack (APPEND) or just below the top mark (APPENDS).
func inCtx(stack []Value, marks []int, x Value) bool {
	if n := len(stack); n > 0 && stack[n-1] == x {
		return true
	}
	if k := len(marks); k > 0 {
		if m := marks[k-1]; m > 0 && stack[m-1] == x {
			return true
		}
	}
	return false
}

// atEntryKey reports whether a value pushed now would be the top-level
// dict's value under entryKey.
func (d *Decoder) atEntryKey(stack []Value, kinds []Kind) bool {
	n := len(stack)
	if n < 2 || kindIn(kinds, stack[0]) != KindDict {
		return false
	}
	switch {
	case len(d.marks) == 1 && d.marks[0] == 1 && (n-1)%2 == 1:
	case len(d.marks) == 0 && n == 2:
	default:
		return false
	}
	// (The Doc's tables are not up to date here: only an inline string,
	// as every string but the 2^29th and later is, can be the key.)
	if v := stack[n-1]; v&tagMask == inlineBit|strBit {
		return d.doc.strs[v&^(inlineBit|strBit)] == d.entryKey
	}
	return false
}

// setEntry hands kv, set on the entry v, to the handler.
func (d *Decoder) setEntry(v Value, kv []Value) error {
	d.takes = d.takes[:0]
	if _, ok := TicketID(v); ok {
		return ErrNotStreamable // a taken list used as a dict
	}
	if len(kv)%2 != 0 {
		return ErrNotStreamable
	}
	for i := 0; i < len(kv); i += 2 {
		switch kindIn(d.doc.kinds, kv[i]) {
		case KindString, KindInt, KindUint:
		default:
			return ErrNotStreamable
		}
	}
	n, _ := d.doc.Entry(v)
	return d.entries.SetEntry(n, kv)
}

// take is a container the handler took: its Value and the handler's id.
type take struct {
	v  Value
	id uint32
}

// Take tells the decoder, from EntryHandler.SetEntry, that the handler
// has kept what it needs of the list v, a value of the entry being set
// (a snapshot's frames list, interned as the handler's stack id), so that
// the list need not be kept. When the list was made by that entry and
// nothing but the memo refers to it, the decoder drops it and puts, in
// its memo entry, the Value Ticket(id) returns: the handler gets that
// Value back where the pickle fetches the list again (PyTorch shares a
// frames list between entries), and anything else that gets it fails
// (Doc.ToAny, as for an entry), so that the caller decodes again without
// streaming. Otherwise the list stays as it is. id must be below 2^28.
func (d *Decoder) Take(v Value, id uint32) {
	if id < maxTickets {
		d.takes = append(d.takes, take{v, id})
	}
}

// maxTickets bounds Take's ids; tickets are the entry numbers from
// maxEntries-1 down, which no entry reaches while fewer than
// maxEntries-maxTickets entries exist.
const maxTickets = 1 << 28

// Ticket returns the Value that stands for the list taken with id.
func Ticket(id uint32) Value { return tagMask | Value(maxEntries-1-id) }

// TicketID reports whether v is a Ticket, and its id.
func TicketID(v Value) (uint32, bool) {
	if v&tagMask != tagMask {
		return 0, false
	}
	n := uint32(v &^ tagMask)
	if n < maxEntries-maxTickets || n >= maxEntries {
		return 0, false
	}
	return maxEntries - 1 - n, true
}

// reclaim drops the list the handler took of the entry just set, when it
// is safe: the entry made the list, no other value it made is kept (only
// scalars besides the list, no other container memoized), the items it
// added are the list's alone, and the list is memoized once, in this
// entry. The stack below the entry cannot hold the list: the entry has
// stayed where it was created (lastPos; a copy pushed again from the memo
// or by DUP resets it), so nothing below it was popped or pushed since,
// and the list was made after it. (Looking for the list there took a
// tenth of the import of a snapshot with call stacks: the stack holds
// the entries since the last APPENDS, about a thousand.)
func (d *Decoder) reclaim(kinds []Kind, memo []Value, mbase uint64) {
	t := d.takes[0]
	v := t.v
	doc := d.doc
	if v >= inlineBit || int(v) < d.lastLen || int(v) >= len(kinds) || kinds[v] != KindList ||
		d.nEntries >= maxEntries-maxTickets || d.lastMemo < mbase || d.sparse != nil {
		return
	}
	for i := d.lastLen; i < len(kinds); i++ {
		if Value(i) != v && kinds[i] >= KindList {
			return // another container
		}
	}
	x := doc.xs[v]
	start, n := int(x>>32), int(uint32(x)&lowMask)
	if x&chainedBit != 0 || (n > 0 && start != d.lastItems) || d.lastItems+n != len(doc.items) {
		return
	}
	slot := -1
	for i := int(d.lastMemo - mbase); i < len(memo); i++ {
		switch m := memo[i]; {
		case m == v:
			if slot >= 0 {
				return
			}
			slot = i
		case m < inlineBit:
			return // a value of the table memoized
		}
	}
	if slot < 0 {
		return
	}
	memo[slot] = Ticket(t.id)
	doc.items = doc.items[:d.lastItems]
	d.keep = d.lastKeep
}

// Partial returns, after DecodeDoc failed, the values decoded so far and
// the decoder's stack (bottom first): what a cut-off pickle held up to the
// error, for callers that can salvage part of it.
func (d *Decoder) Partial() (*Doc, []Value) {
	return d.doc, append([]Value(nil), d.stack...)
}

// Offset returns the byte offset the decoder has reached.
func (d *Decoder) Offset() int64 { return int64(d.pos) }

func (d *Decoder) errAt(off int, op byte, class error, format string, args ...any) error {
	return &Error{Offset: int64(off), Op: op, Msg: fmt.Sprintf(format, args...), Err: class}
}

func (d *Decoder) truncated(off int, op byte, what string) error {
	return &Error{Offset: int64(off), Op: op, Msg: fmt.Sprintf("input ends at byte %d inside %s", len(d.data), what), Err: ErrTruncated}
}

// need checks that n more bytes exist after the opcode at off.
func (d *Decoder) need(off int, op byte, n uint64) error {
	if n > uint64(len(d.data)-d.pos) {
		return d.truncated(off, op, fmt.Sprintf("an argument of %d bytes", n))
	}
	return nil
}

func (d *Decoder) push(k Kind, x uint64) {
	if k == KindInt && x < maxInline {
		d.stack = append(d.stack, inlineBit|Value(x))
		return
	}
	d.stack = append(d.stack, Value(len(d.doc.kinds)))
	d.doc.kinds = append(d.doc.kinds, k)
	d.doc.xs = append(d.doc.xs, x)
}

func (d *Decoder) pushStr(b []byte) {
	doc := d.doc
	var i uint32
	if len(b) <= internMaxLen {
		var ok bool
		if i, ok = doc.intern[string(b)]; !ok {
			s := string(b)
			i = uint32(len(doc.strs))
			doc.strs = append(doc.strs, s)
			if len(doc.intern) < internMaxEntries {
				doc.intern[s] = i
			}
		}
	} else {
		i = uint32(len(doc.strs))
		doc.strs = append(doc.strs, string(b))
	}
	if v, ok := strValue(i); ok {
		d.stack = append(d.stack, v)
		return
	}
	d.push(KindString, uint64(i))
}

// shortStr returns the string index of b, a SHORT_BINUNICODE argument.
// A snapshot repeats a few short strings (keys, actions, "N/A") millions
// of times: a small cache sits in front of the intern map.
func (d *Decoder) shortStr(b []byte) uint32 {
	doc := d.doc
	h := len(b) * 31
	if len(b) > 0 {
		h += int(b[0]) + int(b[len(b)-1])*7
	}
	c := &d.strCache[h&(len(d.strCache)-1)]
	if c.ok && c.s == string(b) {
		return c.id
	}
	i, ok := doc.intern[string(b)]
	if !ok {
		i = uint32(len(doc.strs))
		str := string(b)
		doc.strs = append(doc.strs, str)
		if len(doc.intern) < internMaxEntries {
			doc.intern[str] = i
			ok = true
		}
	}
	if ok { // only interned strings: they have one index
		c.s, c.id, c.ok = doc.strs[i], i, true
	}
	return i
}

func (d *Decoder) pushCont(k Kind) Value {
	d.push(k, 0)
	d.keep = len(d.doc.kinds)
	return d.top()
}

// appendItems adds items to the container v. (The items table stays below
// 2^31 entries: each item was pushed by an opcode of at least one byte.)
func (d *Decoder) appendItems(v Value, items []Value) {
	if len(items) == 0 {
		return
	}
	doc := d.doc
	d.keep = len(doc.kinds) // the items may be any value made so far
	if int(v) < d.takenBelow && doc.kinds[v] == KindDict {
		d.taken = nil // a dict a list taken may hold changes (see take)
	}
	x := doc.xs[v]
	if d.entries != nil && d.appendEntries(v, x, items) {
		return
	}
	end := uint32(len(doc.items))
	doc.items = append(doc.items, items...)
	if x&chainedBit == 0 {
		start, n := uint32(x>>32), uint32(x)&lowMask
		switch {
		case n == 0:
			doc.xs[v] = uint64(end)<<32 | uint64(len(items))
		case start+n == end:
			doc.xs[v] = x + uint64(len(items))
		default:
			// Other items were stored since: chain the run and the new items.
			first := len(doc.chunks)
			doc.chunks = append(doc.chunks,
				chunk{start: start, n: n, next: int32(first + 1)},
				chunk{start: end, n: uint32(len(items)), next: -1})
			doc.xs[v] = uint64(first)<<32 | chainedBit | uint64(first+1)
		}
		return
	}
	first, last := x>>32, x&lowMask
	if lc := &doc.chunks[last]; !lc.entries && lc.start+lc.n == end {
		lc.n += uint32(len(items))
		return
	}
	nl := len(doc.chunks)
	doc.chunks = append(doc.chunks, chunk{start: end, n: uint32(len(items)), next: -1})
	doc.chunks[last].next = int32(nl)
	doc.xs[v] = first<<32 | chainedBit | uint64(nl)
}

// appendEntries adds items to the list v (its bits x) as a chunk of
// entries when they are consecutive streamed entries, extending the
// list's last chunk when they follow it; it reports whether it did.
func (d *Decoder) appendEntries(v Value, x uint64, items []Value) bool {
	if items[0]&tagMask != tagMask || d.doc.kinds[v] != KindList {
		return false
	}
	for i := 1; i < len(items); i++ {
		if items[i] != items[i-1]+1 {
			return false
		}
	}
	doc := d.doc
	first, n := uint32(items[0]&^tagMask), uint32(len(items))
	switch {
	case x == 0:
		c := len(doc.chunks)
		doc.chunks = append(doc.chunks, chunk{start: first, n: n, next: -1, entries: true})
		doc.xs[v] = uint64(c)<<32 | chainedBit | uint64(c)
	case x&chainedBit == 0:
		// Items in the table first: chain them, then the entries.
		start, cnt := uint32(x>>32), uint32(x)&lowMask
		c := len(doc.chunks)
		doc.chunks = append(doc.chunks,
			chunk{start: start, n: cnt, next: int32(c + 1)},
			chunk{start: first, n: n, next: -1, entries: true})
		doc.xs[v] = uint64(c)<<32 | chainedBit | uint64(c+1)
	default:
		head, last := x>>32, x&lowMask
		if lc := &doc.chunks[last]; lc.entries && lc.start+lc.n == first {
			lc.n += n
			return true
		}
		c := len(doc.chunks)
		doc.chunks = append(doc.chunks, chunk{start: first, n: n, next: -1, entries: true})
		doc.chunks[last].next = int32(c)
		doc.xs[v] = head<<32 | chainedBit | uint64(c)
	}
	return true
}

func (d *Decoder) memoGet(idx uint64) (Value, bool) {
	if idx < d.memoBase {
		v := d.memoOldAt(idx)
		return v, v != memoHole
	}
	if i := idx - d.memoBase; i < uint64(len(d.memo)) {
		v := d.memo[i]
		return v, v != memoHole
	}
	v, ok := d.sparse[idx]
	return v, ok
}

func (d *Decoder) memoPut(idx uint64, v Value) {
	if p := d.par; p != nil && idx < p.base+uint64(len(p.memo)) {
		d.stopPar() // the workers read the memo as it was
	}
	if v < inlineBit && int(v) >= d.keep {
		d.keep = int(v) + 1
	}
	n := d.memoLen()
	switch {
	case idx < d.memoBase:
		d.memoSetOld(idx, v)
	case idx < n:
		d.memo[idx-d.memoBase] = v
	case idx == n:
		d.memo = append(d.memo, v)
	case idx-n <= maxMemoGap && idx < uint64(len(d.data)) && d.sparse == nil:
		// A real pickle stores at most one memo entry per input byte; a
		// wider gap goes to the map so no input can inflate the slice.
		for d.memoLen() < idx {
			d.memo = append(d.memo, memoHole)
		}
		d.memo = append(d.memo, v)
	default:
		if d.sparse == nil {
			d.sparse = make(map[uint64]Value)
		}
		d.sparse[idx] = v
	}
}

// line reads a newline-terminated argument (text opcodes of protocol 0).
func (d *Decoder) line(off int, op byte) (string, error) {
	rest := d.data[d.pos:]
	i := bytes.IndexByte(rest, '\n')
	if i < 0 {
		return "", d.truncated(off, op, "a text argument")
	}
	s := string(rest[:i])
	d.pos += i + 1
	return s, nil
}

// decodeLong decodes a little-endian two's complement integer.
func decodeLong(b []byte) (Kind, uint64, bool) {
	if len(b) == 0 {
		return KindInt, 0, true
	}
	neg := b[len(b)-1]&0x80 != 0
	for len(b) > 1 {
		last, prev := b[len(b)-1], b[len(b)-2]
		if (last == 0 && prev&0x80 == 0) || (last == 0xff && prev&0x80 != 0) {
			b = b[:len(b)-1]
			continue
		}
		break
	}
	if len(b) > 9 || (len(b) == 9 && (neg || b[8] != 0)) {
		return 0, 0, false
	}
	var u uint64
	for i := min(len(b), 8) - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	if len(b) == 9 {
		return KindUint, u, true
	}
	if neg {
		shift := uint(64 - 8*len(b))
		return KindInt, uint64(int64(u<<shift) >> shift), true
	}
	if u > math.MaxInt64 {
		return KindUint, u, true
	}
	return KindInt, u, true
}

func (d *Decoder) top() Value { return d.stack[len(d.stack)-1] }

// pushGot pushes v, taken from the memo or the stack: if it is the latest
// entry, its values may now be referred to from elsewhere.
func (d *Decoder) pushGot(v Value) {
	if v == d.lastEntry {
		d.lastPos = -1
	}
	d.stack = append(d.stack, v)
}

// have checks that n values are on the stack above the top mark.
func (d *Decoder) have(off int, op byte, n int) error {
	base := 0
	if len(d.marks) > 0 {
		base = d.marks[len(d.marks)-1]
	}
	if len(d.stack)-base < n {
		return d.errAt(off, op, ErrMalformed, "needs %d values on the stack, has %d", n, len(d.stack)-base)
	}
	return nil
}

func (d *Decoder) popMark(off int, op byte) (int, error) {
	if len(d.marks) == 0 {
		return 0, d.errAt(off, op, ErrMalformed, "no MARK on the stack")
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	return m, nil
}

func (d *Decoder) setItems(off int, op byte, dict Value, kv []Value) error {
	if dict&tagMask == tagMask {
		return d.setEntry(dict, kv)
	}
	x := d.doc.val(dict)
	if x.kind != KindDict {
		return d.errAt(off, op, ErrMalformed, "setting items of a %s, not a dict", x.kind)
	}
	if len(kv)%2 != 0 {
		return d.errAt(off, op, ErrMalformed, "odd number (%d) of keys and values", len(kv))
	}
	for i := 0; i < len(kv); i += 2 {
		switch k := d.doc.val(kv[i]).kind; k {
		case KindString, KindInt, KindUint:
		default:
			return d.errAt(off, op, ErrMalformed, "dict key of type %s (only str and int keys are supported)", k)
		}
	}
	d.appendItems(dict, kv)
	return nil
}

func (d *Decoder) appendList(off int, op byte, list Value, items []Value) error {
	x := d.doc.val(list)
	if x.kind != KindList {
		return d.errAt(off, op, ErrMalformed, "appending to a %s, not a list", x.kind)
	}
	d.appendItems(list, items)
	return nil
}

// DecodeDoc decodes the pickle into a Doc.
func (d *Decoder) DecodeDoc() (*Doc, error) {
	data := d.data
	total := int64(len(data))
	every := d.ProgressEvery
	if every <= 0 {
		every = 8 << 20
	}
	nextProgress := len(data) + 1
	if d.Progress != nil {
		nextProgress = int(min(every, total))
	}
	sampleAt := len(data) + 1 // where to size the tables for the whole input
	switch {
	case len(data) > sampleBytes && d.entries == nil:
		sampleAt = sampleBytes
	case len(data) > 4*streamSampleBytes && d.entries != nil:
		sampleAt = streamSampleBytes
	}
	var sampled *[2]int // streaming: the offset and the items at the first sample
	// Every consumedEvery bytes: Consumed, the memo's compaction and the
	// tables' limits.
	nextConsumed := d.checkEvery
	next := min(nextProgress, sampleAt, nextConsumed)
	doc := d.doc
	if int64(len(data)) >= MaxInputBytes {
		return nil, &Error{Offset: 0, Msg: fmt.Sprintf("pickle of %d bytes is larger than the %d bytes supported", len(data), MaxInputBytes), Err: ErrMalformed}
	}
	// The opcodes a snapshot is made of are decoded inline on local copies
	// of the decoder's state; anything else (and every error) goes through
	// step, the general path.
	d.sizeTables()
	pos, stack, kinds, xs, memo := d.pos, d.stack, doc.kinds, doc.xs, d.memo
	mbase := d.memoBase
	defer d.stopPar()
	for {
		if pos >= len(data) {
			d.pos, d.stack, doc.kinds, doc.xs, d.memo = pos, stack, kinds, xs, memo
			return nil, &Error{Offset: total, Msg: "input ends before the STOP opcode", Err: ErrTruncated}
		}
		if pos >= next {
			if pos >= sampleAt {
				switch {
				case d.entries == nil:
					kinds, xs = reserve(kinds, pos, len(data)), reserve(xs, pos, len(data))
					doc.items = reserve(doc.items, pos, len(data))
					doc.chunks = reserve(doc.chunks, pos, len(data))
					sampleAt = len(data) + 1
				case sampled == nil:
					sampled = &[2]int{pos, len(doc.items)}
					sampleAt = 2 * streamSampleBytes
				default:
					doc.items = reserveMore(doc.items, sampled[1], float64(pos-sampled[0]), len(data)-pos, streamItems)
					sampleAt = len(data) + 1
				}
			}
			if pos >= nextProgress {
				d.Progress(int64(pos), total)
				nextProgress = pos + int(every)
			}
			if pos >= nextConsumed {
				if d.Consumed != nil {
					d.Consumed(pos)
				}
				nextConsumed = pos + d.checkEvery
				// An opcode adds at most one value, string, chunk or item
				// (counting the stack's, which APPENDS and SETITEMS move
				// into items), so these checks hold the tables' 32-bit
				// indexes until the next time.
				if lim, iv := d.maxValues-d.checkEvery, d.checkEvery; len(kinds) > lim || len(doc.strs) > lim ||
					len(doc.chunks) > lim || len(doc.items)+len(stack) > d.maxItems-iv {
					d.pos, d.stack, doc.kinds, doc.xs, d.memo = pos, stack, kinds, xs, memo
					return nil, &Error{Offset: int64(pos), Op: data[pos], Msg: fmt.Sprintf("more values, strings or items than the decoder's tables hold (%d values, %d items)", d.maxValues, d.maxItems), Err: ErrMalformed}
				}
				memo = d.compactMemo(memo)
				mbase = d.memoBase
			}
			next = min(nextProgress, sampleAt, nextConsumed)
		}
		op := data[pos]
		switch op {
		case opBinGet:
			if pos+1 < len(data) {
				if idx := uint64(data[pos+1]) - mbase; idx < uint64(len(memo)) && memo[idx] != memoHole {
					v := memo[idx]
					if v == d.lastEntry {
						d.lastPos = -1
					}
					stack = append(stack, v)
					pos += 2
					continue
				}
			}
		case opLongBinGet:
			if pos+4 < len(data) {
				if idx := uint64(binary.LittleEndian.Uint32(data[pos+1:])) - mbase; idx < uint64(len(memo)) && memo[idx] != memoHole {
					v := memo[idx]
					if v == d.lastEntry {
						d.lastPos = -1
					}
					stack = append(stack, v)
					pos += 5
					continue
				}
			}
		case opMemoize:
			if len(stack) > 0 && d.sparse == nil {
				v := stack[len(stack)-1]
				if v < inlineBit && int(v) >= d.keep {
					d.keep = int(v) + 1
				}
				memo = append(memo, v)
				pos++
				continue
			}
		case opMark:
			d.marks = append(d.marks, len(stack))
			pos++
			continue
		case opEmptyDict, opEmptyList:
			k := KindDict
			if op == opEmptyList {
				k = KindList
			}
			v := Value(len(kinds))
			if d.entries != nil {
				switch {
				case op == opEmptyDict && d.cur != noValue && inCtx(stack, d.marks, d.cur):
					if d.Workers > 1 && !d.launched && !d.noFast && d.settled() {
						d.launched = true
						d.launch(pos, memo)
					}
					if p := d.par; p != nil && p.hop >= 0 && pos >= p.hop {
						// Chunks decoded by the workers (parallel.go).
						for p.hop >= 0 && p.hop < pos {
							p.skip()
						}
						if pos == p.hop {
							doc.kinds, doc.xs = kinds, xs
							var err error
							at := pos
							pos, stack, memo, err = d.take(pos, stack, memo)
							if err != nil {
								return nil, err
							}
							kinds, xs = doc.kinds, doc.xs
							if pos != at {
								continue
							}
						}
					}
					if d.nEntries >= maxEntries {
						return nil, ErrNotStreamable
					}
					v = tagMask | Value(d.nEntries)
					d.entries.NewEntry(d.nEntries, pos)
					d.nEntries++
					d.lastEntry, d.lastPos, d.lastLen = v, len(stack), len(kinds)
					d.lastKeep, d.lastItems, d.lastMemo = d.keep, len(doc.items), mbase+uint64(len(memo))
					stack = append(stack, v)
					pos++
					// The usual entry, MEMOIZE MARK (key value)* SETITEMS
					// with scalar values, goes to the handler in one go.
					if pos+1 < len(data) && data[pos] == opMemoize && data[pos+1] == opMark && d.sparse == nil && !d.noFast {
						end, ok, err := d.fastEntry(pos+2, v, &memo, &kinds, &xs)
						if err != nil {
							return nil, err
						}
						if ok {
							pos = end
						}
					}
					continue
				case op == opEmptyDict:
				case d.outer == noValue:
					if d.atEntryKey(stack, kinds) {
						d.outer = v
					}
				case inCtx(stack, d.marks, d.outer):
					d.cur = v
				}
			}
			stack = append(stack, v)
			kinds = append(kinds, k)
			xs = append(xs, 0)
			d.keep = len(kinds)
			pos++
			continue
		case opBinInt1:
			if pos+1 < len(data) {
				stack = append(stack, inlineBit|Value(data[pos+1]))
				pos += 2
				continue
			}
		case opBinInt2:
			if pos+2 < len(data) {
				stack = append(stack, inlineBit|Value(binary.LittleEndian.Uint16(data[pos+1:])))
				pos += 3
				continue
			}
		case opBinInt:
			if pos+4 < len(data) {
				if x := int32(binary.LittleEndian.Uint32(data[pos+1:])); x >= 0 && x < maxInline {
					stack = append(stack, inlineBit|Value(x))
				} else {
					stack = append(stack, Value(len(kinds)))
					kinds = append(kinds, KindInt)
					xs = append(xs, uint64(int64(x)))
				}
				pos += 5
				continue
			}
		case opLong1:
			if pos+10 <= len(data) {
				if n := int(data[pos+1]); n >= 1 && n <= 8 {
					// Up to 8 bytes: one load, sign-extended from byte n.
					sh := uint(64 - 8*n)
					x := uint64(int64(binary.LittleEndian.Uint64(data[pos+2:])<<sh) >> sh)
					if x < maxInline {
						stack = append(stack, inlineBit|Value(x))
					} else {
						stack = append(stack, Value(len(kinds)))
						kinds = append(kinds, KindInt)
						xs = append(xs, x)
					}
					pos += 2 + n
					continue
				}
			}
			if pos+1 < len(data) {
				n := int(data[pos+1])
				if pos+2+n <= len(data) {
					if k, x, ok := decodeLong(data[pos+2 : pos+2+n]); ok {
						stack = append(stack, Value(len(kinds)))
						kinds = append(kinds, k)
						xs = append(xs, x)
						pos += 2 + n
						continue
					}
				}
			}
		case opShortBinUni:
			if pos+1 < len(data) {
				n := int(data[pos+1])
				if pos+2+n <= len(data) {
					i := d.shortStr(data[pos+2 : pos+2+n])
					if v, ok := strValue(i); ok {
						stack = append(stack, v)
					} else {
						stack = append(stack, Value(len(kinds)))
						kinds = append(kinds, KindString)
						xs = append(xs, uint64(i))
					}
					pos += 2 + n
					continue
				}
			}
		case opSetItems, opAppends:
			if nm := len(d.marks); nm > 0 {
				m := d.marks[nm-1]
				if op == opSetItems && m > 0 && stack[m-1]&tagMask == tagMask {
					// A streamed entry's pairs: to the handler, and the
					// values it had made are dropped unless something
					// else may refer to them.
					doc.kinds, doc.xs = kinds, xs
					e := stack[m-1]
					if err := d.setEntry(e, stack[m:]); err != nil {
						return nil, err
					}
					if e == d.lastEntry && m-1 == d.lastPos {
						if len(d.takes) == 1 {
							d.reclaim(kinds, memo, mbase)
						}
						if n := max(d.keep, d.lastLen); n < len(kinds) {
							kinds, xs = kinds[:n], xs[:n]
						}
					}
					d.marks = d.marks[:nm-1]
					stack = stack[:m]
					pos++
					continue
				}
				want := KindDict
				if op == opAppends {
					want = KindList
				}
				if m > 0 && kindIn(kinds, stack[m-1]) == want && (op == opAppends || (len(stack)-m)%2 == 0) {
					items := stack[m:]
					okKeys := true
					if op == opSetItems {
						for i := 0; i < len(items); i += 2 {
							if k := kindIn(kinds, items[i]); k != KindString && k != KindInt && k != KindUint {
								okKeys = false
								break
							}
						}
					}
					if okKeys {
						d.marks = d.marks[:nm-1]
						doc.kinds, doc.xs = kinds, xs
						d.appendItems(stack[m-1], items) // a dict or list: never inline
						stack = stack[:m]
						pos++
						continue
					}
				}
			}
		}
		// The general path.
		d.pos, d.stack, doc.kinds, doc.xs, d.memo = pos+1, stack, kinds, xs, memo
		done, err := d.step(pos, op)
		if err != nil {
			return nil, err
		}
		if done {
			return doc, nil
		}
		pos, stack, kinds, xs, memo = d.pos, d.stack, doc.kinds, doc.xs, d.memo
	}
}

// fastEntry decodes, from pos, the pairs of the streamed entry e just
// created and memoized (the MEMOIZE and MARK after its EMPTY_DICT, which
// pos follows), when they are what a snapshot's entries are made of: keys
// that are strings, given as SHORT_BINUNICODE (then maybe MEMOIZE) or
// taken from the memo; values that are ints (BININT1, BININT2, BININT,
// LONG1 of up to 8 bytes), strings (the same two ways), None, True,
// False, BINFLOAT, another memoized scalar or a memoized Ticket, and on a
// worker whose handler is a ParallelLists a list of fetched values (see
// refList); then SETITEMS. It hands the
// pairs to the handler and returns the offset after SETITEMS, with the
// memo and tables as the general path would have left them. On anything
// else (another opcode, a FRAME between two pairs, input that ends, a
// memo index out of range) it returns ok false having changed nothing the
// general path would not do the same (strings it interned are interned
// again to the same index), and the caller decodes from the MEMOIZE on.
func (d *Decoder) fastEntry(pos int, e Value, memop *[]Value, kindsp *[]Kind, xsp *[]uint64) (end int, ok bool, err error) {
	// Few values live in registers through the loop: the memo is read
	// through a local copy, and the rare appends to it and to the value
	// table go through the pointers.
	data, mbase := d.data, d.memoBase
	m0, k0, p0, o0 := len(*memop), len(*kindsp), len(d.doc.pending), len(d.doc.order)
	*memop = append(*memop, e) // the dict's MEMOIZE
	// look is where memo indexes from mbase are read: the memo itself,
	// or on a worker (see parallel.go) the memo as it was when the
	// workers started (what the worker memoizes has indexes it does not
	// know).
	memo := *memop
	look := memo
	if d.par != nil && d.par.worker {
		look = d.par.memo
	}
	kv := d.kv[:0]
	for {
		if pos >= len(data) {
			goto bail
		}
		if data[pos] == opFrame { // a frame may start between any two pairs' items
			if pos+9 > len(data) {
				goto bail
			}
			pos += 9
			continue
		}
		if data[pos] == opSetItems {
			break
		}
		var key, val Value
		// The key.
		switch data[pos] {
		case opBinGet, opLongBinGet:
			var idx uint64
			if data[pos] == opBinGet {
				if pos+1 >= len(data) {
					goto bail
				}
				idx = uint64(data[pos+1])
				pos += 2
			} else {
				if pos+4 >= len(data) {
					goto bail
				}
				idx = uint64(binary.LittleEndian.Uint32(data[pos+1:]))
				pos += 5
			}
			switch i := idx - mbase; {
			case i < uint64(len(look)):
				key = look[i]
			case idx < mbase:
				key = d.memoOldAt(idx)
			case d.par != nil && d.par.worker && d.par.defers:
				var ok bool
				if key, ok = d.par.extra[idx]; !ok {
					key = missedValue
					d.par.misses = append(d.par.misses, idx|missKey)
				}
			default:
				goto bail
			}
		case opShortBinUni:
			if pos+1 >= len(data) || pos+2+int(data[pos+1]) > len(data) {
				goto bail
			}
			n := int(data[pos+1])
			sv, ok := strValue(d.shortStr(data[pos+2 : pos+2+n]))
			if !ok {
				goto bail
			}
			key = sv
			pos += 2 + n
			if pos < len(data) && data[pos] == opMemoize {
				*memop = append(*memop, key)
				if memo = *memop; d.par == nil || !d.par.worker {
					look = memo
				}
				pos++
			}
		default:
			goto bail
		}
		if key&tagMask != inlineBit|strBit { // also a memo hole
			goto bail
		}
		// The value.
		if pos < len(data) && data[pos] == opFrame {
			if pos+9 > len(data) {
				goto bail
			}
			pos += 9
		}
		if pos >= len(data) {
			goto bail
		}
		switch data[pos] {
		case opBinInt1:
			if pos+1 >= len(data) {
				goto bail
			}
			val = inlineBit | Value(data[pos+1])
			pos += 2
		case opBinInt2:
			if pos+2 >= len(data) {
				goto bail
			}
			val = inlineBit | Value(binary.LittleEndian.Uint16(data[pos+1:]))
			pos += 3
		case opBinInt:
			if pos+4 >= len(data) {
				goto bail
			}
			if x := int32(binary.LittleEndian.Uint32(data[pos+1:])); x >= 0 && x < maxInline {
				val = inlineBit | Value(x)
			} else {
				val = tableValue(kindsp, xsp, KindInt, uint64(int64(x)))
			}
			pos += 5
		case opLong1:
			n := 0
			if pos+1 < len(data) {
				n = int(data[pos+1])
			}
			if n < 1 || n > 8 || pos+10 > len(data) {
				goto bail
			}
			sh := uint(64 - 8*n)
			if x := uint64(int64(binary.LittleEndian.Uint64(data[pos+2:])<<sh) >> sh); x < maxInline {
				val = inlineBit | Value(x)
			} else {
				val = tableValue(kindsp, xsp, KindInt, x)
			}
			pos += 2 + n
		case opShortBinUni:
			if pos+1 >= len(data) || pos+2+int(data[pos+1]) > len(data) {
				goto bail
			}
			n := int(data[pos+1])
			sv, ok := strValue(d.shortStr(data[pos+2 : pos+2+n]))
			if !ok {
				goto bail
			}
			val = sv
			pos += 2 + n
			if pos < len(data) && data[pos] == opMemoize {
				*memop = append(*memop, val)
				if memo = *memop; d.par == nil || !d.par.worker {
					look = memo
				}
				pos++
			}
		case opBinGet, opLongBinGet:
			var idx uint64
			if data[pos] == opBinGet {
				if pos+1 >= len(data) {
					goto bail
				}
				idx = uint64(data[pos+1])
				pos += 2
			} else {
				if pos+4 >= len(data) {
					goto bail
				}
				idx = uint64(binary.LittleEndian.Uint32(data[pos+1:]))
				pos += 5
			}
			switch i := idx - mbase; {
			case i < uint64(len(look)):
				val = look[i]
			case idx < mbase:
				val = d.memoOldAt(idx)
			case d.par != nil && d.par.worker && d.par.defers:
				var ok bool
				if val, ok = d.par.extra[idx]; !ok {
					if d.par.lists {
						// Left to the handler (see Doc.Ref).
						kv = append(kv, key, d.fetchRef(idx, m0, kindsp, xsp))
						continue
					}
					val = missedValue
					d.par.misses = append(d.par.misses, idx)
				}
			default:
				goto bail
			}
			// A memoized string or small int, or a list the handler took;
			// a container (but to a worker's ParallelLists: see Doc.Ref),
			// an entry or a hole goes the general way.
			if !fetchedScalar(val) {
				if val < inlineBit && d.par != nil && d.par.worker && d.par.lists {
					kv = append(kv, key, d.fetchRef(idx, m0, kindsp, xsp))
					continue
				}
				goto bail
			}
		case opEmptyList:
			// On a worker, a list of fetched values (see ParallelLists).
			if d.par == nil || !d.par.worker || !d.par.lists {
				goto bail
			}
			var ok bool
			if val, pos, ok = d.refList(pos, memop, kindsp, xsp); !ok {
				goto bail
			}
			memo = *memop
		case opNone:
			val = tableValue(kindsp, xsp, KindNone, 0)
			pos++
		case opNewTrue, opNewFalse:
			val = tableValue(kindsp, xsp, KindBool, uint64(opNewFalse-data[pos]))
			pos++
		case opBinFloat:
			if pos+8 >= len(data) {
				goto bail
			}
			val = tableValue(kindsp, xsp, KindFloat, binary.BigEndian.Uint64(data[pos+1:]))
			pos += 9
		default:
			goto bail
		}
		kv = append(kv, key, val)
	}
	d.kv = kv
	d.doc.kinds, d.doc.xs = *kindsp, *xsp
	if d.par == nil || len(d.par.misses) == 0 { // (a worker's entry with a value it could not fetch is left to the decoder)
		if err := d.entries.SetEntry(uint32(e&^tagMask), kv); err != nil {
			if err != ErrDeferEntry || d.par == nil || !d.par.worker || !d.par.lists {
				return 0, false, err
			}
			d.deferRefs(p0, o0)
		}
	} else {
		d.deferRefs(p0, o0)
	}
	if d.par != nil && d.par.made && int(d.par.madeV) > k0 {
		// On a worker, the entry's list moves to the entry's first value,
		// so that the entry's other values are dropped.
		p, v := d.par, d.par.madeV
		(*kindsp)[k0], (*xsp)[k0] = (*kindsp)[v], (*xsp)[v]
		(*memop)[p.madeSlot] = Value(k0)
		d.keep = k0 + 1
	}
	// The values made for the entry are dropped, as after the general
	// path's SETITEMS.
	if keep := max(d.keep, d.lastLen); keep < len(*kindsp) {
		*kindsp, *xsp = (*kindsp)[:keep], (*xsp)[:keep]
	}
	return pos + 1, true, nil
bail:
	*memop, *kindsp, *xsp = (*memop)[:m0], (*kindsp)[:k0], (*xsp)[:k0]
	d.doc.pending = d.doc.pending[:p0]
	d.doc.order = d.doc.order[:o0]
	return 0, false, nil
}

// fetchRef returns, on a worker whose handler is a ParallelLists, the
// chunk's Value of the fetch of memo index idx by the entry whose dict the
// chunk's memo entry m0 is (see Doc.Ref).
func (d *Decoder) fetchRef(idx uint64, m0 int, kindsp *[]Kind, xsp *[]uint64) Value {
	doc := d.doc
	n := len(doc.pending)
	doc.pending = append(doc.pending, uint64(m0)<<32|idx)
	doc.order = append(doc.order, orderRef|uint32(n))
	return tableValue(kindsp, xsp, kindRef, uint64(n))
}

// orderRef marks a fetch in Doc.order; lowIdx is the memo index of a
// Doc.pending.
const (
	orderRef = 1 << 31
	lowIdx   = 1<<32 - 1
)

// deferRefs leaves the entry being decoded on a worker, whose fetches
// from p0 on the handler would have taken (Doc.Ref), to the decoder: they
// become misses. (Doc.order from o0 holds them alone: an entry left to
// the decoder with a list of its own ends its chunk, see decode.)
func (d *Decoder) deferRefs(p0, o0 int) {
	doc := d.doc
	for _, r := range doc.pending[p0:] {
		d.par.misses = append(d.par.misses, r&lowIdx)
	}
	doc.pending, doc.order = doc.pending[:p0], doc.order[:o0]
}

// refList decodes, on a worker whose handler is a ParallelLists, the list
// that starts at pos (EMPTY_LIST) when it is what a snapshot's frames list
// is, the entry's only one: memoized, then its items in batches (MARK items APPENDS, or
// one item and APPEND), each item fetched from the memo: a container in
// the memo as it was at the launch (a frame dict), or an index memoized
// since (a frame first met after the launch), which the decoder checks
// and resolves when it takes the chunk (see pendingRef). It returns the
// list's Value in the chunk's Doc (see Doc.RefList) and the offset after
// the list; ok false on anything else (fastEntry then bails, and the
// decoder decodes the entry).
func (d *Decoder) refList(pos int, memop *[]Value, kindsp *[]Kind, xsp *[]uint64) (v Value, end int, ok bool) {
	data, p, doc := d.data, d.par, d.doc
	// item returns the item fetched at pos and the offset after it.
	item := func(pos int) (uint64, int, bool) {
		var idx uint64
		switch {
		case pos+1 < len(data) && data[pos] == opBinGet:
			idx, pos = uint64(data[pos+1]), pos+2
		case pos+4 < len(data) && data[pos] == opLongBinGet:
			idx, pos = uint64(binary.LittleEndian.Uint32(data[pos+1:])), pos+5
		default:
			return 0, 0, false
		}
		var v Value
		switch i := idx - d.memoBase; {
		case i < uint64(len(p.memo)):
			v = p.memo[i]
		case idx < d.memoBase:
			v = d.memoOldAt(idx)
		default:
			return pendingRef | idx, pos, true
		}
		return uint64(v), pos, v < inlineBit
	}
	skipFrame := func(pos int) int {
		for pos+9 <= len(data) && data[pos] == opFrame {
			pos += 9
		}
		return pos
	}
	if len(doc.refLists) == 0 && cap(*kindsp) < p.room {
		// The chunk's first list: room for one an entry.
		*kindsp, *xsp = withRoom(*kindsp, p.room), withRoom(*xsp, p.room)
	}
	// One list an entry, memoized (as a snapshot's frames list is): the
	// decoder drops such a list once its handler has taken it, and keeps
	// the others (see reclaim), which the worker does not make.
	if p.made || pos+1 >= len(data) || data[pos+1] != opMemoize {
		return 0, 0, false
	}
	v = tableValue(kindsp, xsp, kindRefs, 0)
	slot := len(*memop)
	*memop = append(*memop, v)
	doc.listSlots = append(doc.listSlots, uint32(slot))
	pos += 2
	refs := p.refBuf[:0]
	for {
		pos = skipFrame(pos)
		if pos >= len(data) {
			return 0, 0, false
		}
		if data[pos] == opMark {
			for pos = skipFrame(pos + 1); pos < len(data) && data[pos] != opAppends; pos = skipFrame(pos) {
				var it uint64
				if it, pos, ok = item(pos); !ok {
					return 0, 0, false
				}
				refs = append(refs, it)
			}
			if pos >= len(data) {
				return 0, 0, false
			}
			pos++
			continue
		}
		// One item and APPEND, or what follows the list (the next key).
		it, next, ok := item(pos)
		if next = skipFrame(next); !ok || next >= len(data) || data[next] != opAppend {
			break
		}
		refs = append(refs, it)
		pos = next + 1
	}
	p.refBuf = refs
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(refs))), len(refs)*8)
	id, seen := p.listIDs[string(b)]
	if !seen {
		id = uint32(len(doc.refLists))
		doc.order = append(doc.order, id)
		doc.refLists = append(doc.refLists, uint64(len(doc.refs))<<32|uint64(len(refs)))
		doc.refs = append(doc.refs, refs...)
		p.listIDs[string(b)] = id
		for _, r := range refs {
			if r&pendingRef != 0 {
				p.itemMisses = append(p.itemMisses, r&^pendingRef|missItem)
			}
		}
	}
	(*xsp)[v] = uint64(id)
	d.keep = int(v) + 1 // the list stays: the memo holds it
	p.made, p.madeV, p.madeSlot = true, v, slot
	return v, pos, true
}

// pendingRef marks, in a chunk's list of fetched values, a memo index
// memoized after the launch: the decoder takes the chunk when the index
// was memoized before the chunk, as a container, and gives TakeList the
// container.
const pendingRef = 1 << 63

// fetchedScalar reports whether v, fetched from the memo, is a value
// fastEntry takes: a string or small int, or the Ticket of a list the
// handler took (a snapshot's free_completed fetches the frames list of
// its free_requested).
func fetchedScalar(v Value) bool {
	if v&tagMask == tagMask {
		_, ok := TicketID(v)
		return ok
	}
	return v&inlineBit != 0
}

// tableValue appends a scalar to the value table and returns its Value.
func tableValue(kindsp *[]Kind, xsp *[]uint64, k Kind, x uint64) Value {
	v := Value(len(*kindsp))
	*kindsp = append(*kindsp, k)
	*xsp = append(*xsp, x)
	return v
}

// step decodes the opcode op at off (d.pos is past it): the general path.
func (d *Decoder) step(off int, op byte) (done bool, err error) {
	data := d.data
	switch op {
	case opBinGet:
		if d.pos >= len(data) {
			return false, d.truncated(off, op, "an argument of 1 bytes")
		}
		v, ok := d.memoGet(uint64(data[d.pos]))
		if !ok {
			return false, d.errAt(off, op, ErrMalformed, "memo index %d was never stored", data[d.pos])
		}
		d.pos++
		d.pushGot(v)
	case opLongBinGet:
		if err := d.need(off, op, 4); err != nil {
			return false, err
		}
		idx := uint64(binary.LittleEndian.Uint32(data[d.pos:]))
		d.pos += 4
		v, ok := d.memoGet(idx)
		if !ok {
			return false, d.errAt(off, op, ErrMalformed, "memo index %d was never stored", idx)
		}
		d.pushGot(v)
	case opMemoize:
		if len(d.stack) == 0 {
			return false, d.errAt(off, op, ErrMalformed, "stack is empty")
		}
		d.memoPut(d.memoLen(), d.top())
	case opMark:
		d.marks = append(d.marks, len(d.stack))
	case opEmptyDict:
		d.pushCont(KindDict)
	case opEmptyList:
		d.pushCont(KindList)
	case opEmptyTuple:
		d.pushCont(KindTuple)
	case opNone:
		d.push(KindNone, 0)
	case opNewTrue:
		d.push(KindBool, 1)
	case opNewFalse:
		d.push(KindBool, 0)
	case opBinInt1:
		if d.pos >= len(data) {
			return false, d.truncated(off, op, "an argument of 1 bytes")
		}
		d.push(KindInt, uint64(data[d.pos]))
		d.pos++
	case opBinInt2:
		if err := d.need(off, op, 2); err != nil {
			return false, err
		}
		d.push(KindInt, uint64(binary.LittleEndian.Uint16(data[d.pos:])))
		d.pos += 2
	case opBinInt:
		if err := d.need(off, op, 4); err != nil {
			return false, err
		}
		d.push(KindInt, uint64(int64(int32(binary.LittleEndian.Uint32(data[d.pos:])))))
		d.pos += 4
	case opLong1, opLong4:
		var n uint64
		if op == opLong1 {
			if err := d.need(off, op, 1); err != nil {
				return false, err
			}
			n = uint64(data[d.pos])
			d.pos++
		} else {
			if err := d.need(off, op, 4); err != nil {
				return false, err
			}
			n4 := int32(binary.LittleEndian.Uint32(data[d.pos:]))
			d.pos += 4
			if n4 < 0 {
				return false, d.errAt(off, op, ErrMalformed, "negative length")
			}
			n = uint64(n4)
		}
		if err := d.need(off, op, n); err != nil {
			return false, err
		}
		k, x, ok := decodeLong(data[d.pos : d.pos+int(n)])
		if !ok {
			return false, d.errAt(off, op, ErrMalformed, "integer of %d bytes does not fit in 64 bits", n)
		}
		d.pos += int(n)
		d.push(k, x)
	case opShortBinUni, opShortBinBytes, opShortBinString:
		if d.pos >= len(data) {
			return false, d.truncated(off, op, "an argument of 1 bytes")
		}
		n := int(data[d.pos])
		d.pos++
		if err := d.need(off, op, uint64(n)); err != nil {
			return false, err
		}
		d.pushStr(data[d.pos : d.pos+n])
		d.pos += n
	case opBinUnicode, opBinBytes, opBinString:
		if err := d.need(off, op, 4); err != nil {
			return false, err
		}
		n := uint64(binary.LittleEndian.Uint32(data[d.pos:]))
		if op == opBinString && int32(n) < 0 {
			return false, d.errAt(off, op, ErrMalformed, "negative length")
		}
		d.pos += 4
		if err := d.need(off, op, n); err != nil {
			return false, err
		}
		d.pushStr(data[d.pos : d.pos+int(n)])
		d.pos += int(n)
	case opBinUnicode8, opBinBytes8, opByteArray8:
		if err := d.need(off, op, 8); err != nil {
			return false, err
		}
		n := binary.LittleEndian.Uint64(data[d.pos:])
		d.pos += 8
		if err := d.need(off, op, n); err != nil {
			return false, err
		}
		d.pushStr(data[d.pos : d.pos+int(n)])
		d.pos += int(n)
	case opSetItems:
		m, err := d.popMark(off, op)
		if err != nil {
			return false, err
		}
		if m == 0 {
			return false, d.errAt(off, op, ErrMalformed, "no dict below the mark")
		}
		if err := d.setItems(off, op, d.stack[m-1], d.stack[m:]); err != nil {
			return false, err
		}
		d.stack = d.stack[:m]
	case opAppends:
		m, err := d.popMark(off, op)
		if err != nil {
			return false, err
		}
		if m == 0 {
			return false, d.errAt(off, op, ErrMalformed, "no list below the mark")
		}
		if err := d.appendList(off, op, d.stack[m-1], d.stack[m:]); err != nil {
			return false, err
		}
		d.stack = d.stack[:m]
	case opSetItem:
		if err := d.have(off, op, 3); err != nil {
			return false, err
		}
		n := len(d.stack)
		if err := d.setItems(off, op, d.stack[n-3], d.stack[n-2:]); err != nil {
			return false, err
		}
		d.stack = d.stack[:n-2]
	case opAppend:
		if err := d.have(off, op, 2); err != nil {
			return false, err
		}
		n := len(d.stack)
		if err := d.appendList(off, op, d.stack[n-2], d.stack[n-1:]); err != nil {
			return false, err
		}
		d.stack = d.stack[:n-1]
	case opBinPut, opLongBinPut, opPut:
		var idx uint64
		switch op {
		case opBinPut:
			if err := d.need(off, op, 1); err != nil {
				return false, err
			}
			idx = uint64(data[d.pos])
			d.pos++
		case opLongBinPut:
			if err := d.need(off, op, 4); err != nil {
				return false, err
			}
			idx = uint64(binary.LittleEndian.Uint32(data[d.pos:]))
			d.pos += 4
		default:
			s, err := d.line(off, op)
			if err != nil {
				return false, err
			}
			u, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return false, d.errAt(off, op, ErrMalformed, "bad memo index %q", s)
			}
			idx = u
		}
		if len(d.stack) == 0 {
			return false, d.errAt(off, op, ErrMalformed, "stack is empty")
		}
		d.memoPut(idx, d.top())
	case opGet:
		s, err := d.line(off, op)
		if err != nil {
			return false, err
		}
		idx, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return false, d.errAt(off, op, ErrMalformed, "bad memo index %q", s)
		}
		v, ok := d.memoGet(idx)
		if !ok {
			return false, d.errAt(off, op, ErrMalformed, "memo index %d was never stored", idx)
		}
		d.pushGot(v)
	case opProto:
		if err := d.need(off, op, 1); err != nil {
			return false, err
		}
		if p := data[d.pos]; p > 5 {
			return false, d.errAt(off, op, ErrMalformed, "protocol %d is not supported (0 to 5 are)", p)
		}
		d.pos++
	case opFrame:
		if err := d.need(off, op, 8); err != nil {
			return false, err
		}
		// The frame length is only a read-ahead hint: the opcodes inside
		// are checked one by one, so a cut frame fails at the opcode it
		// cuts, after everything before it was decoded.
		d.pos += 8
	case opStop:
		if len(d.stack) != 1 || len(d.marks) != 0 {
			if len(d.stack) == 0 {
				return false, d.errAt(off, op, ErrMalformed, "stack is empty")
			}
			return false, d.errAt(off, op, ErrMalformed, "%d values and %d marks left on the stack", len(d.stack), len(d.marks))
		}
		if d.entries != nil && d.stack[0]&tagMask == tagMask {
			return false, ErrNotStreamable
		}
		if d.Progress != nil {
			d.Progress(int64(d.pos), int64(len(d.data)))
		}
		d.doc.root = d.stack[0]
		return true, nil
	case opInt, opLong:
		s, err := d.line(off, op)
		if err != nil {
			return false, err
		}
		if op == opInt && (s == "00" || s == "01") {
			d.push(KindBool, uint64(s[1]-'0'))
			break
		}
		if len(s) > 0 && s[len(s)-1] == 'L' {
			s = s[:len(s)-1]
		}
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			d.push(KindInt, uint64(i))
		} else if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			d.push(KindUint, u)
		} else {
			return false, d.errAt(off, op, ErrMalformed, "bad or too wide integer %q", s)
		}
	case opBinFloat:
		if err := d.need(off, op, 8); err != nil {
			return false, err
		}
		d.push(KindFloat, binary.BigEndian.Uint64(data[d.pos:]))
		d.pos += 8
	case opFloat:
		s, err := d.line(off, op)
		if err != nil {
			return false, err
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return false, d.errAt(off, op, ErrMalformed, "bad float %q", s)
		}
		d.push(KindFloat, math.Float64bits(f))
	case opPop:
		switch {
		case len(d.marks) > 0 && d.marks[len(d.marks)-1] == len(d.stack):
			d.marks = d.marks[:len(d.marks)-1] // Python's POP also pops a bare mark
		case len(d.stack) > 0:
			d.stack = d.stack[:len(d.stack)-1]
		default:
			return false, d.errAt(off, op, ErrMalformed, "stack is empty")
		}
	case opPopMark:
		m, err := d.popMark(off, op)
		if err != nil {
			return false, err
		}
		d.stack = d.stack[:m]
	case opDup:
		if err := d.have(off, op, 1); err != nil {
			return false, err
		}
		d.pushGot(d.top())
	case opTuple1, opTuple2, opTuple3:
		n := int(op-opTuple1) + 1
		if err := d.have(off, op, n); err != nil {
			return false, err
		}
		items := append([]Value(nil), d.stack[len(d.stack)-n:]...)
		d.stack = d.stack[:len(d.stack)-n]
		d.appendItems(d.pushCont(KindTuple), items)
	case opTuple, opList:
		m, err := d.popMark(off, op)
		if err != nil {
			return false, err
		}
		items := append([]Value(nil), d.stack[m:]...)
		d.stack = d.stack[:m]
		k := KindTuple
		if op == opList {
			k = KindList
		}
		d.appendItems(d.pushCont(k), items)
	case opDict:
		m, err := d.popMark(off, op)
		if err != nil {
			return false, err
		}
		items := append([]Value(nil), d.stack[m:]...)
		d.stack = d.stack[:m]
		d.pushCont(KindDict)
		if err := d.setItems(off, op, d.top(), items); err != nil {
			return false, err
		}
	default:
		if isUnsafe(op) {
			return false, &Error{Offset: int64(off), Op: op, Msg: "refused: it would construct an object or call code; a memory snapshot holds only plain data", Err: ErrUnsafe}
		}
		if _, known := opNames[op]; known {
			return false, d.errAt(off, op, ErrMalformed, "not supported: a memory snapshot never holds it")
		}
		return false, &Error{Offset: int64(off), Msg: fmt.Sprintf("unknown opcode 0x%02x", op), Err: ErrMalformed}
	}
	return false, nil
}

// spare returns the unused capacity of s as bytes.
func spare[T any](s []T) []byte {
	if len(s) == cap(s) {
		return nil
	}
	var z T
	rest := s[len(s):cap(s)]
	return unsafe.Slice((*byte)(unsafe.Pointer(&rest[0])), uintptr(len(rest))*unsafe.Sizeof(z))
}
