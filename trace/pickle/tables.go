package pickle

import (
	"math"
	"unsafe"
)

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
// that rate (moreRoom), as a decode of the whole tree sizes its tables
// at sampleBytes. (Grown by appending, a table is copied at every doubling
// and faulted in page by page.) The values are not sized so: streaming,
// their table is cut back to what is kept after each entry, and its
// length at a sample says little (a snapshot whose frames the memo shares
// keeps few of them).
const (
	streamValues      = 4096
	streamItems       = 16384
	streamChunks      = 64
	streamSampleBytes = 1 << 20
)

// initialBytes is how much input NewDecoder sizes the tables for.
const initialBytes = 256 << 10

// grown returns the length a table of n values for the first pos bytes
// of input needs for total bytes, with a fifth more.
func grown(n, pos, total int) int {
	return int(float64(n)/float64(pos)*float64(total)*1.2) + 1024
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

// moreRoom is the capacity that fits what the rest of the input needs
// (rest bytes) if s grows as it did from length was over the last span
// bytes: cap(s) when s has not outgrown first, its first size.
func moreRoom[T any](s []T, was int, span float64, rest, first int) int {
	if len(s) <= first || len(s) <= was {
		return cap(s)
	}
	return len(s) + int(float64(len(s)-was)/span*float64(rest)*1.2) + 1024
}

// The memory budget: what DecodeDoc builds (its tables, the stack, the
// memo, the strings) may take budgetFloor bytes and budgetRatio bytes per
// byte of input. Real snapshots take 1.2 to 2.2 bytes per byte of input,
// tables' spare room included; a pickle of one-byte opcodes that each
// make a value (95 MiB of EMPTY_LIST, say) would take 13 and more. The
// budget is checked every budgetEvery bytes of input, and before the
// tables are sized for the whole input.
const (
	budgetFloor = 32 << 20
	budgetRatio = 3
	budgetEvery = 1 << 20
)

// What an entry of each table costs, in bytes.
const (
	costValue = 9  // a kind and its bits
	costItem  = 4  // a Value (items, the stack, the memo)
	costChunk = 16 // a chunk of items
	costStr   = 16 // a string's header, besides its bytes
	costEntry = 48 // an entry of the sparse memo, a map's
)

// cost returns the bytes what the decoder has built takes, by its
// tables' capacities.
func (d *Decoder) cost() int64 {
	doc := d.doc
	for _, s := range doc.strs[d.strsCounted:] {
		d.strBytes += int64(len(s))
	}
	d.strsCounted = len(doc.strs)
	return int64(cap(doc.kinds)) + 8*int64(cap(doc.xs)) +
		costItem*int64(cap(doc.items)+cap(d.stack)+cap(d.memo)+2*cap(d.marks)) +
		costChunk*int64(cap(doc.chunks)) + costStr*int64(len(doc.strs)) + d.strBytes +
		costEntry*int64(len(d.sparse))
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

// sizeTables makes the Doc's tables when DecodeDoc starts. Decoding a
// whole tree, they are sized for the first initialBytes of input, then
// for the whole input from what its first sampleBytes used, so that they
// neither grow by copying nor are zeroed in vain. Streaming, entries'
// scalars reuse their table entries: what else a snapshot holds (its
// segments and blocks, its settings) takes a few thousand values and
// items, and the tables grow when they need. (Sized for the input, they
// would be zeroed and faulted in for nothing.)
func (d *Decoder) sizeTables() {
	doc := d.doc
	if doc.kinds != nil {
		return
	}
	n := initialBytes
	if size := d.inputSize(); size >= 0 {
		n = int(min(size, initialBytes))
	}
	nv, ni, nc := n/8+16, n/4+16, n/64+16
	if d.entries != nil {
		nv, ni, nc = min(nv, streamValues), min(ni, streamItems), min(nc, streamChunks)
	}
	doc.kinds = make([]Kind, 0, nv)
	doc.xs = make([]uint64, 0, nv)
	doc.items = make([]Value, 0, ni)
	doc.chunks = make([]chunk, 0, nc)
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
