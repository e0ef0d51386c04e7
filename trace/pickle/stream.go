package pickle

import "errors"

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
// and the list was made after it. (Looking for the list there would cost
// a search of the entries since the last APPENDS, about a thousand, for
// every entry.)
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
