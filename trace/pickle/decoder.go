package pickle

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

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

// Decoder decodes one pickle, held in memory or read from an io.Reader
// (see reader.go).
type Decoder struct {
	data   []byte
	pos    int
	doc    *Doc
	stack  []Value
	marks  []int
	memo   []Value // memo entries from memoBase on (see memo.go)
	sparse map[uint64]Value

	memoBase    uint64               // the memo index of memo[0]
	memoOld     []memoBlock          // the memo entries below memoBase
	oldHot      [oldHotSize]hotEntry // the latest of them fetched (see memoOldAt)
	memoShift   uint8                // memoOld's blocks hold 2^memoShift entries
	compactAt   int                  // the memo length from which it is compacted
	checkEvery  int                  // bytes between compactions and limit checks (consumedEvery)
	maxValues   int                  // the value, string and chunk tables' limit (maxValues)
	maxItems    int                  // the items table's limit (maxItems)
	budget      int64                // the bytes what the decoder builds may take (see budgetFloor)
	strBytes    int64                // the bytes of the strings counted so far by cost
	strsCounted int                  // the strings counted so far

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

	in *streamIn // the reader and the window, reading from one (reader.go)
}

// noValue stands for "no value" in the decoder's streaming state.
const noValue = ^Value(0)

// NewDecoder returns a decoder of data.
func NewDecoder(data []byte) *Decoder {
	return newDecoder(data, min(len(data), initialBytes))
}

// newDecoder returns a decoder of data, its memo sized for n bytes of
// input (the tables are sized by DecodeDoc: see sizeTables).
func newDecoder(data []byte, n int) *Decoder {
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
		budget:     budgetFloor + budgetRatio*int64(len(data)),
		lastEntry:  noValue,
		lastPos:    -1,
	}
	return d
}

// Partial returns, after DecodeDoc failed, the values decoded so far and
// the decoder's stack (bottom first): what a cut-off pickle held up to the
// error, for callers that can salvage part of it.
func (d *Decoder) Partial() (*Doc, []Value) {
	return d.doc, append([]Value(nil), d.stack...)
}

// Offset returns the byte offset the decoder has reached.
func (d *Decoder) Offset() int64 { return d.abs(d.pos) }

func (d *Decoder) errAt(off int, op byte, class error, format string, args ...any) error {
	return &Error{Offset: d.abs(off), Op: op, Msg: fmt.Sprintf(format, args...), Err: class}
}

func (d *Decoder) truncated(off int, op byte, what string) error {
	return &Error{Offset: d.abs(off), Op: op, Msg: fmt.Sprintf("input ends at byte %d inside %s%s", d.abs(len(d.data)), what, d.readEnd()), Err: ErrTruncated}
}

// need checks that n more bytes exist after the opcode at off.
func (d *Decoder) need(off int, op byte, n uint64) error {
	if n > uint64(len(d.data)-d.pos) && !d.more(n) {
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
	case idx-n <= maxMemoGap && idx < d.memoCeil() && d.sparse == nil:
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
	for i < 0 {
		if !d.more(uint64(len(rest)) + 1) {
			return "", d.truncated(off, op, "a text argument")
		}
		at := len(rest)
		rest = d.data[d.pos:]
		if i = bytes.IndexByte(rest[at:], '\n'); i >= 0 {
			i += at
		}
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

// schedule is when DecodeDoc's periodic work is next due (see periodic),
// in offsets of the input (of the window, for next).
type schedule struct {
	every        int     // bytes between Progress calls
	nextProgress int     // Progress
	sampleAt     int     // sizing the tables for the whole input
	sampled      *[2]int // streaming: the offset and the items at the first sample
	nextConsumed int     // Consumed, the memo's compaction and the tables' limits
	nextBudget   int     // the memory budget's check
	refill       int     // sliding the window (reading from an io.Reader)
	never        int     // an offset past the input's end
	next         int     // the earliest of them, as an offset of the window
}

func (d *Decoder) newSchedule() schedule {
	size := int(d.inputSize()) // -1 when not known
	s := schedule{every: int(d.ProgressEvery), never: size + 1, nextConsumed: d.checkEvery, nextBudget: budgetEvery}
	if size < 0 || d.in != nil {
		s.never = math.MaxInt
	}
	s.nextProgress, s.sampleAt, s.refill = s.never, s.never, s.never
	if s.every <= 0 {
		s.every = 8 << 20
	}
	if d.Progress != nil {
		s.nextProgress = s.every
		if size >= 0 {
			s.nextProgress = min(s.every, size)
		}
	}
	switch {
	case size > sampleBytes && d.entries == nil:
		s.sampleAt = sampleBytes
	case size > 4*streamSampleBytes && d.entries != nil:
		s.sampleAt = streamSampleBytes
	}
	if d.in != nil {
		s.refill = 0 // the first window
	}
	s.next = min(s.nextProgress, s.sampleAt, s.nextConsumed, s.nextBudget, s.refill)
	return s
}

// DecodeDoc decodes the pickle into a Doc.
//
// The opcodes a snapshot is made of are decoded inline on local copies of
// the decoder's state; anything else (and every error) goes through step,
// the general path.
func (d *Decoder) DecodeDoc() (*Doc, error) {
	sch, err := d.startDoc()
	if err != nil {
		return nil, err
	}
	data, doc := d.data, d.doc
	pos, stack, kinds, xs, memo := d.pos, d.stack, doc.kinds, doc.xs, d.memo
	mbase := d.memoBase
	defer d.stopPar()
	for {
		if pos >= sch.next || pos >= len(data) {
			d.pos, d.stack, doc.kinds, doc.xs, d.memo = pos, stack, kinds, xs, memo
			if err := d.periodicOrEnd(&sch); err != nil {
				return nil, err
			}
			data, pos = d.data, d.pos
			kinds, xs, memo, mbase = doc.kinds, doc.xs, d.memo, d.memoBase
		}
		op := data[pos]
		// The opcodes a snapshot is made of, inline (opTable says which).
		if opTable[op].paths&pathInline != 0 {
			switch op {
			case opBinGet:
				if pos+1 < len(data) {
					if idx := uint64(data[pos+1]) - mbase; idx < uint64(len(memo)) && memo[idx] != memoHole {
						stack = d.pushFetched(stack, memo[idx])
						pos += 2
						continue
					}
				}
			case opLongBinGet:
				if pos+4 < len(data) {
					if idx := uint64(binary.LittleEndian.Uint32(data[pos+1:])) - mbase; idx < uint64(len(memo)) && memo[idx] != memoHole {
						stack = d.pushFetched(stack, memo[idx])
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
				v := Value(len(kinds))
				if d.entries != nil {
					if op == opEmptyDict && d.cur != noValue && inCtx(stack, d.marks, d.cur) {
						var err error
						if pos, stack, memo, kinds, xs, err = d.startEntry(pos, stack, memo, kinds, xs, mbase); err != nil {
							return nil, err
						}
						continue
					}
					d.streamContext(op, v, stack, kinds)
				}
				stack, kinds, xs = append(stack, v), append(kinds, containerKind(op)), append(xs, 0)
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
					stack, kinds, xs = push(stack, kinds, xs, KindInt, uint64(int64(int32(binary.LittleEndian.Uint32(data[pos+1:])))))
					pos += 5
					continue
				}
			case opLong1:
				if pos+10 <= len(data) && data[pos+1] >= 1 && data[pos+1] <= 8 {
					// Up to 8 bytes: one load, sign-extended from byte n.
					n := int(data[pos+1])
					sh := uint(64 - 8*n)
					x := uint64(int64(binary.LittleEndian.Uint64(data[pos+2:])<<sh) >> sh)
					stack, kinds, xs = push(stack, kinds, xs, KindInt, x)
					pos += 2 + n
					continue
				}
				if k, x, next, ok := long1(data, pos); ok {
					stack, kinds, xs = push(stack, kinds, xs, k, x)
					pos = next
					continue
				}
			case opShortBinUni:
				if pos+1 < len(data) && pos+2+int(data[pos+1]) <= len(data) {
					n := int(data[pos+1])
					i := d.shortStr(data[pos+2 : pos+2+n])
					if v, ok := strValue(i); ok {
						stack = append(stack, v)
					} else {
						stack, kinds, xs = push(stack, kinds, xs, KindString, uint64(i))
					}
					pos += 2 + n
					continue
				}
			case opSetItems, opAppends:
				nm := len(d.marks)
				if nm == 0 || d.marks[nm-1] == 0 {
					break
				}
				m := d.marks[nm-1]
				if op == opSetItems && stack[m-1]&tagMask == tagMask {
					// A streamed entry's pairs: to the handler, and the values it
					// had made are dropped unless something else may refer to them.
					if kinds, xs, err = d.setEntryPairs(stack, m, memo, kinds, xs, mbase); err != nil {
						return nil, err
					}
				} else if itemsOK(op, kinds, stack[m-1:]) {
					doc.kinds, doc.xs = kinds, xs
					d.appendItems(stack[m-1], stack[m:]) // a dict or list: never inline
				} else {
					break
				}
				d.marks = d.marks[:nm-1]
				stack = stack[:m]
				pos++
				continue
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
		data = d.data // (grown, reading from an io.Reader, for a long argument)
		pos, stack, kinds, xs, memo = d.pos, d.stack, doc.kinds, doc.xs, d.memo
	}
}

// startDoc checks the input's size, sizes the tables and returns
// DecodeDoc's schedule.
func (d *Decoder) startDoc() (schedule, error) {
	if d.in == nil && int64(len(d.data)) >= MaxInputBytes {
		return schedule{}, &Error{Offset: 0, Msg: fmt.Sprintf("pickle of %d bytes is larger than the %d bytes supported", len(d.data), MaxInputBytes), Err: ErrMalformed}
	}
	sch := d.newSchedule()
	d.sizeTables()
	return sch, nil
}

// pushFetched pushes onto DecodeDoc's stack v, fetched from the memo.
func (d *Decoder) pushFetched(stack []Value, v Value) []Value {
	if v == d.lastEntry {
		d.lastPos = -1
	}
	return append(stack, v)
}

// containerKind is the kind of the container EMPTY_DICT or EMPTY_LIST
// (op) makes.
func containerKind(op byte) Kind {
	if op == opEmptyList {
		return KindList
	}
	return KindDict
}

// push pushes onto DecodeDoc's stack the scalar of kind k and value x:
// inline when it is an int small enough, else through the value table.
func push(stack []Value, kinds []Kind, xs []uint64, k Kind, x uint64) ([]Value, []Kind, []uint64) {
	if k == KindInt && x < maxInline {
		return append(stack, inlineBit|Value(x)), kinds, xs
	}
	return append(stack, Value(len(kinds))), append(kinds, k), append(xs, x)
}

// long1 decodes the LONG1 at pos of any length (see decodeLong): its
// kind, its value and the offset after it; ok false when the input ends
// within it or its value is too large.
func long1(data []byte, pos int) (k Kind, x uint64, next int, ok bool) {
	if pos+1 >= len(data) {
		return 0, 0, 0, false
	}
	n := int(data[pos+1])
	if pos+2+n > len(data) {
		return 0, 0, 0, false
	}
	k, x, ok = decodeLong(data[pos+2 : pos+2+n])
	return k, x, pos + 2 + n, ok
}

// streamContext follows, for DecodeDoc streaming entries, the container v
// an EMPTY_DICT or EMPTY_LIST (op) makes that does not start an entry:
// the dict of the streamed key's value (outer), or a list in it (cur),
// whose dicts are entries.
func (d *Decoder) streamContext(op byte, v Value, stack []Value, kinds []Kind) {
	switch {
	case op == opEmptyDict:
	case d.outer == noValue:
		if d.atEntryKey(stack, kinds) {
			d.outer = v
		}
	case inCtx(stack, d.marks, d.outer):
		d.cur = v
	}
}

// itemsOK reports whether SETITEMS or APPENDS (op) may end the items of
// the container c, c and its items being cs: a dict's pairs whose keys it
// takes, or a list's items.
func itemsOK(op byte, kinds []Kind, cs []Value) bool {
	if op == opAppends {
		return kindIn(kinds, cs[0]) == KindList
	}
	return kindIn(kinds, cs[0]) == KindDict && (len(cs)-1)%2 == 0 && keysOK(kinds, cs[1:])
}

// periodicOrEnd does DecodeDoc's periodic work when it is due at d.pos
// (reading from an io.Reader, the window slides first: d.data and d.pos
// change), and fails when the input ends there.
func (d *Decoder) periodicOrEnd(sch *schedule) error {
	if d.pos >= sch.next {
		if err := d.periodic(sch); err != nil {
			return err
		}
	}
	if d.pos >= len(d.data) {
		return &Error{Offset: d.abs(len(d.data)), Msg: "input ends before the STOP opcode" + d.readEnd(), Err: ErrTruncated}
	}
	return nil
}

// periodic does DecodeDoc's work that is due at d.pos (sch says what is):
// sliding the window (reading from an io.Reader), sizing the tables from a
// sample of the input, Progress, Consumed, the memo's compaction, and the
// checks of the tables' limits and of the memory budget.
func (d *Decoder) periodic(sch *schedule) error {
	if d.in != nil && d.abs(d.pos) >= int64(sch.refill) {
		shift, err := d.slide(d.pos)
		d.pos -= shift
		if err != nil {
			return err
		}
		sch.refill = sch.never
		if !d.in.eof {
			sch.refill = int(d.abs(len(d.data) - d.in.low))
		}
	}
	defer func() {
		sch.next = int(int64(min(sch.nextProgress, sch.sampleAt, sch.nextConsumed, sch.nextBudget, sch.refill)) - d.abs(0))
	}()
	if d.pos >= len(d.data) {
		return nil // the input ends: DecodeDoc says so
	}
	doc, pos, op := d.doc, int(d.abs(d.pos)), d.data[d.pos]
	size := int(d.inputSize())
	if pos >= sch.sampleAt {
		switch {
		case size < 0:
			sch.sampleAt = sch.never
		case d.entries == nil:
			// Sized for the whole input at the sample's rate, unless that
			// is past the budget: the tables then grow as they need, and
			// the budget's check stops them.
			nv, ni, nc := grown(len(doc.kinds), pos, size), grown(len(doc.items), pos, size), grown(len(doc.chunks), pos, size)
			if d.cost()+costValue*int64(nv)+costItem*int64(ni)+costChunk*int64(nc) <= d.budget {
				doc.kinds, doc.xs = withRoom(doc.kinds, nv), withRoom(doc.xs, nv)
				doc.items = withRoom(doc.items, ni)
				doc.chunks = withRoom(doc.chunks, nc)
			}
			sch.sampleAt = sch.never
		case sch.sampled == nil:
			sch.sampled = &[2]int{pos, len(doc.items)}
			sch.sampleAt = 2 * streamSampleBytes
		default:
			if n := moreRoom(doc.items, sch.sampled[1], float64(pos-sch.sampled[0]), max(size-pos, 0), streamItems); d.cost()+costItem*int64(n) <= d.budget {
				doc.items = withRoom(doc.items, n)
			}
			sch.sampleAt = sch.never
		}
	}
	if pos >= sch.nextProgress {
		d.Progress(int64(pos), d.progressTotal(int64(pos)))
		sch.nextProgress = pos + sch.every
	}
	if pos >= sch.nextBudget {
		sch.nextBudget = pos + budgetEvery
		if d.in != nil {
			d.budget = budgetFloor + budgetRatio*int64(pos) // the bytes decoded so far
		}
		if c := d.cost(); c > d.budget {
			in := size
			if d.in != nil {
				in = pos
			}
			return &Error{Offset: int64(pos), Op: op, Msg: fmt.Sprintf("what the pickle builds would take %d bytes, past the budget of %d for %d bytes of input", c, d.budget, in), Err: ErrMalformed}
		}
	}
	if pos >= sch.nextConsumed {
		if d.Consumed != nil {
			d.Consumed(pos)
		}
		sch.nextConsumed = pos + d.checkEvery
		// An opcode adds at most one value, string, chunk or item
		// (counting the stack's, which APPENDS and SETITEMS move
		// into items), so these checks hold the tables' 32-bit
		// indexes until the next time.
		if lim, iv := d.maxValues-d.checkEvery, d.checkEvery; len(doc.kinds) > lim || len(doc.strs) > lim ||
			len(doc.chunks) > lim || len(doc.items)+len(d.stack) > d.maxItems-iv {
			return &Error{Offset: int64(pos), Op: op, Msg: fmt.Sprintf("more values, strings or items than the decoder's tables hold (%d values, %d items)", d.maxValues, d.maxItems), Err: ErrMalformed}
		}
		d.memo = d.compactMemo(d.memo)
	}
	return nil
}

// startEntry decodes the EMPTY_DICT at pos that creates a streamed entry
// (DecodeDoc's local state comes and goes as arguments): the workers'
// chunk that starts there, when they have one, else the entry, created
// and, when fastEntry can, handed to the handler with its pairs.
func (d *Decoder) startEntry(pos int, stack, memo []Value, kinds []Kind, xs []uint64, mbase uint64) (int, []Value, []Value, []Kind, []uint64, error) {
	data, doc := d.data, d.doc
	if d.Workers > 1 && !d.launched && !d.noFast && d.in == nil && d.settled() {
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
				return pos, stack, memo, kinds, xs, err
			}
			kinds, xs = doc.kinds, doc.xs
			if pos != at {
				return pos, stack, memo, kinds, xs, nil
			}
		}
	}
	if d.nEntries >= maxEntries {
		return pos, stack, memo, kinds, xs, ErrNotStreamable
	}
	v := tagMask | Value(d.nEntries)
	d.entries.NewEntry(d.nEntries, int(d.abs(pos)))
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
			return pos, stack, memo, kinds, xs, err
		}
		if ok {
			pos = end
		}
	}
	return pos, stack, memo, kinds, xs, nil
}

// setEntryPairs hands the pairs above the mark m, set on the streamed
// entry below it, to the handler; the values the entry made are dropped
// unless something else may refer to them. It returns the value table.
func (d *Decoder) setEntryPairs(stack []Value, m int, memo []Value, kinds []Kind, xs []uint64, mbase uint64) ([]Kind, []uint64, error) {
	d.doc.kinds, d.doc.xs = kinds, xs
	e := stack[m-1]
	if err := d.setEntry(e, stack[m:]); err != nil {
		return kinds, xs, err
	}
	if e == d.lastEntry && m-1 == d.lastPos {
		if len(d.takes) == 1 {
			d.reclaim(kinds, memo, mbase)
		}
		if n := max(d.keep, d.lastLen); n < len(kinds) {
			kinds, xs = kinds[:n], xs[:n]
		}
	}
	return kinds, xs, nil
}

// keysOK reports whether the keys of the pairs kv are all str or int.
func keysOK(kinds []Kind, kv []Value) bool {
	for i := 0; i < len(kv); i += 2 {
		if k := kindIn(kinds, kv[i]); k != KindString && k != KindInt && k != KindUint {
			return false
		}
	}
	return true
}
