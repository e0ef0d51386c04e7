package pickle

import (
	"sync"
	"sync/atomic"
)

// Parallel decoding of streamed entries.
//
// A memory snapshot is almost all trace entries, each a dict of scalars
// made the same way: EMPTY_DICT MEMOIZE MARK, the pairs, SETITEMS, with
// MARK and APPENDS around every thousand of them and a FRAME every 64 KiB.
// When the handler is a ParallelHandler and Decoder.Workers > 1,
// DecodeDoc decodes the first entries itself (see settled), then splits the
// rest of the input into chunks that worker goroutines decode at once,
// each from the first entry that starts in it (found by the bytes the
// entries start with: EMPTY_DICT MEMOIZE MARK and the first key, as the
// entry at the split has them) to the first that starts in the next
// chunk, or to the first thing that is not such an entry. A worker knows
// the memo as it was at the split, but not how many memo entries the
// chunks before its own add: it numbers what it memoizes, its entries and
// its strings from 0 and stops at a reference it cannot resolve. (When
// the handler is a ParallelLists, an entry's frames list is decoded too:
// see there.) An entry the worker cannot decode is left to the decoder,
// and the worker goes on from the next entry of its chunk, as a chunk of
// its own (parChunk.cont).
//
// The decoder goes on through the input as before; when it reaches the
// entry a chunk starts with, in the device list where entries are
// streamed, it takes the chunk's work in one go: the chunk's strings are
// interned, its memo entries appended with their final numbers, its MARK
// and APPENDS replayed on the stack, and its entries handed to
// ParallelHandler.Merge; it then goes on from where the chunk stopped.
// A chunk that started at a false match, or whose start the decoder does
// not reach exactly, is decoded again by the decoder, so the result is the
// sequential decode's in every case: the same Doc, the same entries, the
// same errors at the same offsets.

// ParallelHandler is an EntryHandler whose entries can be decoded on
// worker goroutines (see Decoder.Workers).
type ParallelHandler interface {
	EntryHandler
	// Fork is called once, on the decoding goroutine, before the
	// workers start at input offset off on chunks of about chunkBytes
	// of input. The function it returns is called on worker
	// goroutines, once per chunk, with the chunk's own Doc (its string
	// indexes below NumStrings at the fork are the decoder's, those
	// above are the chunk's own), and returns the handler of the
	// chunk's entries, numbered from 0. A SetEntry error of that
	// handler ends the chunk before the entry; the decoder then decodes
	// the entry itself.
	Fork(off, chunkBytes int) func(doc *Doc) EntryHandler
	// Merge takes, on the decoding goroutine, the entries from to to-1
	// of the chunk handler h as entries first, first+1..., in order (the
	// entries of a chunk come in one or more calls, in order; an entry
	// the chunk could not convert comes between them through NewEntry
	// and SetEntry); end is the input offset after the chunk; m maps
	// what the chunk numbered on its own to the decoder's.
	Merge(h EntryHandler, from, to int, first uint32, end int, m *ChunkMap) error
	// Release is called, on the decoding goroutine, once the decoder is
	// done with the chunk handler h (taken or not), so that its memory
	// may serve another chunk.
	Release(h EntryHandler)
}

const (
	// parLaunch is the fewest entries the decoder decodes itself before
	// the workers start (the memo then holds the keys and actions), and
	// parLaunchMax the most (see settled).
	parLaunch    = 1024
	parLaunchMax = 4096
	// parMinBytes is the least input left at the launch for workers to
	// be worth starting.
	parMinBytes = 1 << 20
	// opsMark and opsAppends are a chunk's MARK and APPENDS; a smaller
	// op is a run of that many entries pushed.
	opsMark    = ^uint32(0)
	opsAppends = ^uint32(1)
	// missedValue is what a worker's fastEntry gives for a memo entry it
	// cannot fetch (the entry is then left to the decoder).
	missedValue = inlineBit | strBit | (maxInlineStr - 1)
)

// deferral is an entry a worker decoded but could not convert: its
// number in the chunk, its offset and the chunk's memo length before it.
type deferral struct {
	k, off, m0 int
	lists      int    // the chunk's lists of fetched values before it
	refs       int    // the chunk's fetches its handler took (Doc.Ref) before it
	order      int    // and both in the order met (Doc.order)
	ops        int    // len(ops) before it, and the entries of ops' last run then
	run        uint32 //   (when that run goes on with this entry)
	misses     []uint64
	check      bool // only its lists' items are to check: the chunk's conversion of it stands
}

// missKey marks, in deferral.misses, a memo index fetched as a key, and
// missItem one fetched as an item of a list of fetched values (see
// pendingRef; the entries with those only are not decoded again).
const (
	missKey  = 1 << 63
	missItem = 1 << 62
)

// parChunk is one chunk's work.
type parChunk struct {
	lo, hi int // the chunk: its entries start in [lo, hi)
	start  int // where its worker started; -1: no entry starts from lo on
	end    int // where it stopped
	n      int
	lists  int      // its lists of fetched values (Doc.RefList) up to end
	refs   int      // its fetches its handler took (Doc.Ref) up to end
	order  int      // and both in the order met (Doc.order)
	memo   []Value  // what it memoized: its entries (from 0), its doc's strings and lists
	ops    []uint32 // MARK, APPENDS and runs of entries
	defers []deferral
	doc    *Doc
	h      EntryHandler
	done   chan struct{} // closed when the chunk and its continuations are decoded
	// cont is the rest of the chunk after an entry its worker left to the
	// decoder, from the next entry: decoded as a chunk of its own, taken
	// after it.
	cont *parChunk
}

// parallel is the decoder's parallel state; on a worker's Decoder,
// worker is set and memo is the memo at the launch (read through it).
type parallel struct {
	worker  bool
	memo    []Value // memo entries from base, at the launch (a copy)
	old     []memoBlock
	base    uint64
	shift   uint8
	strs    []string          // the decoder's strings at the launch
	intern  map[string]uint32 // and those of them interned, up to launchInterned (read only)
	sig     []byte            // the bytes every entry starts with
	fork    func(*Doc) EntryHandler
	release func(EntryHandler)
	lists   bool // the handler is a ParallelLists (see refList)

	// A worker's.
	defers     bool              // fastEntry gives missedValue for a memo index above memo
	misses     []uint64          // the memo indexes of its missedValues (missKey set for a key)
	extra      map[uint64]Value  // memo entries past memo that it knows (see known)
	listIDs    map[string]uint32 // its chunk's lists of fetched values, by their items' bytes
	refBuf     []uint64          // refList's scratch
	itemMisses []uint64          // the memo indexes memoized after the launch in the entry's new lists (missItem set)
	made       bool              // fastEntry made a list of fetched values,
	madeV      Value             //   this one,
	madeSlot   int               //   memoized there
	room       int               // the values its chunk's lists are likely to need

	// The decoder's scratch in take.
	listBuf []uint32    // the ids of a chunk's lists
	refVals []Value     // the values of a chunk's fetches
	fetched [][2]uint32 // its fetches of lists, and their ids
	itemBuf []Value     // the items of a list

	chunks []*parChunk
	next   int // the next chunk the decoder takes or skips
	hop    int // where chunk next starts (-1: none)
	tokens chan struct{}
	memos  chan []Value // chunks' memo slices, taken and idle
	ramp   int          // tokens given so far, until 2w
	quit   chan struct{}
	claim  atomic.Int64
	// waiting is the chunk the decoder waits for (setHop): its worker
	// yields its core to the decoder when done (see work).
	waiting atomic.Int64
	wg      sync.WaitGroup
	// known holds strings memoized after the launch, by memo index, for
	// the workers of chunks not yet started: a chunk's first memo entry
	// of each of its strings, published when the decoder takes it (an
	// action the trace has not had before the launch is fetched from the
	// memo by every later entry).
	known     atomic.Pointer[map[uint64]string]
	published map[string]bool // the strings in known
	stats     ParallelStats
}

// ChunkMap maps what a chunk decoded on a worker numbered on its own to
// the decoder's, for ParallelHandler.Merge.
type ChunkMap struct {
	// Strs maps the chunk's string indexes from the fork's NumStrings on
	// to the decoder's.
	Strs []uint32
	// Lists maps the chunk's lists of fetched values (Doc.RefList) to
	// the ids ParallelLists.TakeList gave them, and Refs its fetches
	// (Doc.Ref) to the values fetched (the decoder's).
	Lists []uint32
	Refs  []Value
}

// ParallelLists is a ParallelHandler that takes the lists its entries
// make of values fetched from the memo (see Decoder.Take): a snapshot's
// frames lists, of frame dicts memoized once and fetched by every later
// entry with the same frame. A worker then decodes an entry with such a
// list, when the values are in the memo as it was at the launch: the
// chunk's Doc holds the list as a number (Doc.RefList), and the decoder,
// when it takes the chunk, hands each list's values to TakeList, puts the
// Ticket of its id where the chunk memoized the list, and gives Merge the
// ids. Other lists are left to the decoder. A value the worker fetches
// from a memo index it does not know (a free_completed fetches its
// free_requested's frames list) is given to the handler as a number
// (Doc.Ref), which it may take (the value then comes with Merge) or not
// (ErrDeferEntry).
type ParallelLists interface {
	ParallelHandler
	// TakeList is called on the decoding goroutine with the items of a
	// list a chunk made (Values of the decoder's Doc, valid during the
	// call), in the order the chunk made them, as the decoder reaches the
	// chunk; it returns the id under which the handler keeps what it
	// needs of the list, as Decoder.Take's id (below 2^28).
	TakeList(items []Value) uint32
}

// ParallelReady is a ParallelHandler that says when the workers may
// start. A worker cannot resolve a string first memoized after the
// launch (an action first met then) until the decoder has taken the
// chunk that memoized it: the chunks started before that leave the
// entries that fetch it to the decoder, which decodes them again. The
// workers therefore start one chunk at a time (three more for each the
// decoder takes), unless the handler is ready: then they all start at
// once.
type ParallelReady interface {
	ParallelHandler
	// ReadyForWorkers is called, on the decoding goroutine, at the
	// creation of each streamed entry from the launch's fewest entries
	// on until the workers start; true when the entries so far have
	// shown the strings most later entries fetch.
	ReadyForWorkers() bool
}

// ParallelStats says how much of a decode the workers did.
type ParallelStats struct {
	Workers int   // workers started (0: none)
	Chunks  int   // chunks the decoder took from them
	Skipped int   // chunks decoded but not taken (the decoder decoded them)
	Entries int64 // entries in the chunks taken
	Redone  int64 // entries of those that the decoder decoded again
	Lists   int64 // lists of those handed to ParallelLists.TakeList
	Refs    int64 // fetches their handlers took unresolved (Doc.Ref)
}

// ParallelStats returns, after DecodeDoc, how much the workers did.
func (d *Decoder) ParallelStats() ParallelStats { return d.parStats }

// ParallelTuning overrides how the workers share a decode (tests; the
// defaults suit snapshots of every size).
type ParallelTuning struct {
	After      uint32 // entries the decoder decodes before the workers start
	MinBytes   int    // input left then for the workers to start
	ChunkBytes int    // bytes of input a chunk spans
}
