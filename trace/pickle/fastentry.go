package pickle

import (
	"encoding/binary"
	"unsafe"
)

// fastEntry decodes, from pos, the pairs of the streamed entry e just
// created and memoized (the MEMOIZE and MARK after its EMPTY_DICT, which
// pos follows), when they are what a snapshot's entries are made of: keys
// that are strings, given as SHORT_BINUNICODE (then maybe MEMOIZE) or
// taken from the memo; values that are ints (BININT1, BININT2, BININT,
// LONG1 of up to 8 bytes), strings (the same two ways), None, True,
// False, BINFLOAT, another memoized scalar or a memoized Ticket, and on a
// worker whose handler is a ParallelLists a list of fetched values (see
// refList); then SETITEMS. A FRAME may come before any item. It hands the
// pairs to the handler and returns the offset after SETITEMS, with the
// memo and tables as the general path would have left them. On anything
// else (another opcode, two FRAMEs in a row, input that ends, a memo
// index out of range) it returns ok false having changed nothing the
// general path would not do the same (strings it interned are interned
// again to the same index), and the caller decodes from the MEMOIZE on.
func (d *Decoder) fastEntry(pos int, e Value, memop *[]Value, kindsp *[]Kind, xsp *[]uint64) (end int, ok bool, err error) {
	// Few values live in registers through the loop: the memo is read
	// through a local copy, and the rare appends to it and to the value
	// table go through the pointers.
	data, mbase := d.data, d.memoBase
	m0, k0, p0, o0 := len(*memop), len(*kindsp), len(d.doc.pending), len(d.doc.order)
	*memop = append(*memop, e) // the dict's MEMOIZE
	look := d.entryLook(*memop)
	kv := d.kv[:0]
	for {
		if pos = skipFrame(data, pos); pos < 0 || pos >= len(data) || opTable[data[pos]].paths&pathEntry == 0 {
			goto bail
		}
		if data[pos] == opSetItems {
			break
		}
		var key, val Value
		// The key.
		switch data[pos] {
		case opBinGet, opLongBinGet:
			var idx uint64
			if idx, pos = getArg(data, pos); pos < 0 {
				goto bail
			}
			var st memoLook
			if key, st = d.entryGet(idx-mbase, look); st == memoMissed {
				key = missedValue
				d.par.misses = append(d.par.misses, idx|missKey)
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
				look = d.entryLook(*memop)
				pos++
			}
		default:
			goto bail
		}
		if key&tagMask != inlineBit|strBit { // also a memo hole, or an index out of the memo (0)
			goto bail
		}
		// The value.
		if pos = skipFrame(data, pos); pos < 0 || pos >= len(data) || opTable[data[pos]].paths&pathEntry == 0 {
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
			val = intValue(kindsp, xsp, uint64(int64(int32(binary.LittleEndian.Uint32(data[pos+1:])))))
			pos += 5
		case opLong1:
			if pos+10 > len(data) || data[pos+1] < 1 || data[pos+1] > 8 {
				goto bail
			}
			n := int(data[pos+1])
			sh := uint(64 - 8*n)
			val = intValue(kindsp, xsp, uint64(int64(binary.LittleEndian.Uint64(data[pos+2:])<<sh)>>sh))
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
				look = d.entryLook(*memop)
				pos++
			}
		case opBinGet, opLongBinGet:
			var idx uint64
			if idx, pos = getArg(data, pos); pos < 0 {
				goto bail
			}
			var st memoLook
			switch val, st = d.entryGet(idx-mbase, look); {
			case st == memoOut:
				goto bail
			case st == memoMissed && d.par.lists:
				// Left to the handler (see Doc.Ref).
				kv = append(kv, key, d.fetchRef(idx, m0, kindsp, xsp))
				continue
			case st == memoMissed:
				val = missedValue
				d.par.misses = append(d.par.misses, idx)
			case !fetchedScalar(val):
				// A container (but to a worker's ParallelLists: see
				// Doc.Ref), an entry or a hole goes the general way.
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
		default: // None, True, False, BINFLOAT
			var ok bool
			if val, pos, ok = rareScalar(data, pos, kindsp, xsp); !ok {
				goto bail
			}
		}
		kv = append(kv, key, val)
	}
	if err := d.endEntry(e, kv, k0, p0, o0, memop, kindsp, xsp); err != nil {
		return 0, false, err
	}
	return pos + 1, true, nil
bail:
	*memop, *kindsp, *xsp = (*memop)[:m0], (*kindsp)[:k0], (*xsp)[:k0]
	d.doc.pending = d.doc.pending[:p0]
	d.doc.order = d.doc.order[:o0]
	return 0, false, nil
}

// skipFrame returns the offset after the FRAME at pos, pos when there is
// none, or -1 when the input ends within it. A frame may start before
// any item of an entry.
func skipFrame(data []byte, pos int) int {
	if pos < len(data) && data[pos] == opFrame {
		if pos+9 > len(data) {
			return -1
		}
		pos += 9
	}
	return pos
}

// entryLook returns where fastEntry reads memo indexes from memoBase,
// memo being the memo: the memo itself, or on a worker (see parallel.go)
// the memo as it was when the workers started (what the worker memoizes
// has indexes it does not know).
func (d *Decoder) entryLook(memo []Value) []Value {
	if d.par != nil && d.par.worker {
		return d.par.memo
	}
	return memo
}

// memoLook is what entryGet found.
type memoLook uint8

const (
	memoFound  memoLook = iota
	memoMissed          // on a worker that defers: an index memoized after the launch, not fetched for it
	memoOut             // out of the memo: fastEntry bails
)

// entryGet returns for fastEntry the Value of memo index memoBase+i,
// look being what entryLook returned. It is small enough to be inlined:
// the others are entryGetFar's.
func (d *Decoder) entryGet(i uint64, look []Value) (v Value, st memoLook) {
	if i < uint64(len(look)) {
		v = look[i]
		return
	}
	v, st = d.entryGetFar(i + d.memoBase)
	return
}

// entryGetFar is entryGet for memo index idx below memoBase (the memo's
// older part) or past look.
func (d *Decoder) entryGetFar(idx uint64) (Value, memoLook) {
	switch {
	case idx < d.memoBase:
		return d.memoOldAt(idx), memoFound
	case d.par != nil && d.par.worker && d.par.defers:
		if v, ok := d.par.extra[idx]; ok {
			return v, memoFound
		}
		return 0, memoMissed
	}
	return 0, memoOut
}

// rareScalar decodes for fastEntry the None, True, False or BINFLOAT at
// pos: its Value and the offset after it; ok false on another opcode or
// when the input ends within it.
func rareScalar(data []byte, pos int, kindsp *[]Kind, xsp *[]uint64) (v Value, end int, ok bool) {
	switch data[pos] {
	case opNone:
		return tableValue(kindsp, xsp, KindNone, 0), pos + 1, true
	case opNewTrue, opNewFalse:
		return tableValue(kindsp, xsp, KindBool, uint64(opNewFalse-data[pos])), pos + 1, true
	case opBinFloat:
		if pos+8 < len(data) {
			return tableValue(kindsp, xsp, KindFloat, binary.BigEndian.Uint64(data[pos+1:])), pos + 9, true
		}
	}
	return 0, 0, false
}

// endEntry hands the pairs kv of the entry e fastEntry decoded to the
// handler, and leaves the value table as the general path's SETITEMS
// would: k0, p0 and o0 are the lengths of the value table, Doc.pending
// and Doc.order before the entry.
func (d *Decoder) endEntry(e Value, kv []Value, k0, p0, o0 int, memop *[]Value, kindsp *[]Kind, xsp *[]uint64) error {
	d.kv = kv
	d.doc.kinds, d.doc.xs = *kindsp, *xsp
	if d.par == nil || len(d.par.misses) == 0 { // (a worker's entry with a value it could not fetch is left to the decoder)
		if err := d.entries.SetEntry(uint32(e&^tagMask), kv); err != nil {
			if err != ErrDeferEntry || d.par == nil || !d.par.worker || !d.par.lists {
				return err
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
	return nil
}

// getArg returns the memo index of the BINGET or LONG_BINGET at pos
// and the position after it, or a negative position when the input ends
// within it.
func getArg(data []byte, pos int) (uint64, int) {
	if data[pos] == opBinGet {
		if pos+1 >= len(data) {
			return 0, -1
		}
		return uint64(data[pos+1]), pos + 2
	}
	if pos+4 >= len(data) {
		return 0, -1
	}
	return uint64(binary.LittleEndian.Uint32(data[pos+1:])), pos + 5
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
		if pos >= len(data) || opTable[data[pos]].paths&pathRefList == 0 {
			return 0, 0, false
		}
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

// intValue returns the Value of the int x: inline when it is small
// enough, else appended to the value table.
func intValue(kindsp *[]Kind, xsp *[]uint64, x uint64) Value {
	if x < maxInline {
		return inlineBit | Value(x)
	}
	return tableValue(kindsp, xsp, KindInt, x)
}

// tableValue appends a scalar to the value table and returns its Value.
func tableValue(kindsp *[]Kind, xsp *[]uint64, k Kind, x uint64) Value {
	v := Value(len(*kindsp))
	*kindsp = append(*kindsp, k)
	*xsp = append(*xsp, x)
	return v
}
