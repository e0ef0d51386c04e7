package pickle

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

// parRecorder is a recorder whose entries may be decoded on workers: each
// chunk records into its own recorder, merged in order.
type parRecorder struct {
	recorder
	merges int
	own    int // the most strings of a chunk's own in a Merge
}

func (r *parRecorder) Fork(off, _ int) func(*Doc) EntryHandler {
	return func(doc *Doc) EntryHandler { return &recorder{doc: doc, kinds: true} }
}

func (r *parRecorder) Merge(h EntryHandler, from, to int, first uint32, end int, m *ChunkMap) error {
	if int(first) != len(r.entries) {
		return fmt.Errorf("merge at entry %d after %d", first, len(r.entries))
	}
	r.entries = append(r.entries, h.(*recorder).entries[from:to]...)
	r.merges++
	r.own = max(r.own, len(m.Strs))
	return nil
}

func (r *parRecorder) Release(h EntryHandler) {}

// decodePar decodes data streamed, on workers when tune is set.
func decodePar(data []byte, workers int, tune *ParallelTuning) (*parRecorder, *Doc, ParallelStats, error) {
	d := NewDecoder(data)
	d.Workers, d.Tuning = workers, tune
	r := &parRecorder{recorder: recorder{doc: d.Doc(), kinds: true}}
	d.StreamEntries("device_traces", r)
	doc, err := d.DecodeDoc()
	return r, doc, d.ParallelStats(), err
}

// sameDecode reports how the parallel decode (got) differs from the
// sequential one (want), or "".
func sameDecode(want, got *parRecorder, wdoc, gdoc *Doc, werr, gerr error) string {
	if fmt.Sprint(werr) != fmt.Sprint(gerr) {
		return fmt.Sprintf("error %v, sequential %v", gerr, werr)
	}
	if werr != nil {
		return ""
	}
	if !reflect.DeepEqual(want.entries, got.entries) {
		for i := range min(len(want.entries), len(got.entries)) {
			if want.entries[i] != got.entries[i] {
				return fmt.Sprintf("%d entries, sequential %d; entry %d is %q, sequential %q", len(got.entries), len(want.entries), i, got.entries[i], want.entries[i])
			}
		}
		return fmt.Sprintf("%d entries, sequential %d", len(got.entries), len(want.entries))
	}
	if wdoc.NumValues() != gdoc.NumValues() || wdoc.NumStrings() != gdoc.NumStrings() {
		return fmt.Sprintf("%d values and %d strings, sequential %d and %d", gdoc.NumValues(), gdoc.NumStrings(), wdoc.NumValues(), wdoc.NumStrings())
	}
	for i := range wdoc.NumStrings() {
		if wdoc.StrAt(uint32(i)) != gdoc.StrAt(uint32(i)) {
			return fmt.Sprintf("string %d is %q, sequential %q", i, gdoc.StrAt(uint32(i)), wdoc.StrAt(uint32(i)))
		}
	}
	return ""
}

// realSnapshots returns the real H200 snapshots of realSet, and every
// *.pickle in $FRAGSIM_SNAPSHOT_DIR when set, decompressed once for all
// the package's tests.
func realSnapshots(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, name := range append(realSet(t), snapshotDirFiles()...) {
		out[filepath.Base(name)] = realSnapshot(t, name)
	}
	return out
}

// realSet returns the paths of the real snapshots that the sweeps over the
// real corpus decode.
//
// In the long pass (FRAGSIM_LONG=1, run without the race detector) they
// are all nine kept for the importer's tests. In the everyday pass they
// are the two smallest: stacks (entries with call stacks, so frame lists)
// and fraction_retry (5,400 entries with OOMs and segment frees, enough
// for the workers to start and take several chunks). The other seven
// repeat the same decoder on more bytes of the same shape, which the
// race detector makes slow. The everyday pass still runs every statement
// that the nine run, through these two, the synthetic snapshots and the
// fuzz seeds, except two that only inputs of megabytes reach (the
// streamed decode's presizing, a FRAME opcode inside a worker's chunk):
// trace/pytorch's everyday tests run those, importing real snapshots
// through this decoder.
func realSet(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob("../pytorch/testdata/real/*.pickle.gz")
	if len(files) == 0 {
		t.Fatal("no real snapshots in ../pytorch/testdata/real")
	}
	if longTests() {
		return files
	}
	return slices.DeleteFunc(files, func(f string) bool {
		b := filepath.Base(f)
		return b != "stacks.pickle.gz" && b != "fraction_retry.pickle.gz"
	})
}

// snapshotDirFiles returns the *.pickle files in $FRAGSIM_SNAPSHOT_DIR,
// if set.
func snapshotDirFiles() []string {
	dir := os.Getenv("FRAGSIM_SNAPSHOT_DIR")
	if dir == "" {
		return nil
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.pickle"))
	return files
}

// longTests reports whether the long sweeps run (FRAGSIM_LONG=1).
func longTests() bool { return os.Getenv("FRAGSIM_LONG") != "" }

// snapshotCache holds the snapshots realSnapshot read, by path: the tests
// share them, read only.
var snapshotCache sync.Map

// realSnapshot returns the bytes of a snapshot, gunzipped when its name
// ends in .gz; each file is read once.
func realSnapshot(t *testing.T, name string) []byte {
	t.Helper()
	if data, ok := snapshotCache.Load(name); ok {
		return data.([]byte)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	snapshotCache.Store(name, data)
	return data
}

// realHead returns the first n bytes of a snapshot, gunzipped when its
// name ends in .gz, reading no more of it.
func realHead(t *testing.T, name string, n int) []byte {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(name, ".gz") {
		if r, err = gzip.NewReader(f); err != nil {
			t.Fatal(err)
		}
	}
	data, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestParallelReal decodes the real snapshots on workers, with the
// default split and with small chunks that start after a few entries, and
// checks that the entries, values and strings are the sequential decode's,
// and that the workers did decode most entries.
func TestParallelReal(t *testing.T) {
	for name, data := range realSnapshots(t) {
		want, wdoc, _, werr := decodePar(data, 1, nil)
		if werr != nil {
			t.Fatalf("%s: %v", name, werr)
		}
		for _, tune := range []*ParallelTuning{
			{After: parLaunch, MinBytes: 0, ChunkBytes: 64 << 10},
			{After: 16, MinBytes: 0, ChunkBytes: 5000},
		} {
			got, gdoc, st, gerr := decodePar(data, 4, tune)
			if diff := sameDecode(want, got, wdoc, gdoc, werr, gerr); diff != "" {
				t.Fatalf("%s, %+v: %s", name, *tune, diff)
			}
			// (The workers leave entries with call stacks to the decoder:
			// parRecorder takes no lists. See TestParallelLists.)
			n := int64(len(want.entries))
			if n > 4*int64(tune.After) && !strings.Contains(name, "stacks") && (st.Workers != 4 || st.Chunks < 2 || st.Entries < n/4) {
				t.Errorf("%s, %+v: the workers decoded %d of %d entries (%+v)", name, *tune, st.Entries, n, st)
			}
		}
	}
}

// TestParallelEdges checks the parallel decode against the sequential one
// on snapshots whose entries the workers must leave to the decoder, or
// cannot align with: new strings fetched again in later chunks, frames
// inside entries, general-path entries, a chunk starting at a false match,
// and cuts at every few bytes.
func TestParallelEdges(t *testing.T) {
	// Entries alternating actions, the second first met in entry 40 and
	// fetched from the memo after; a FRAME inside every 7th entry; an
	// entry with a list value every 50th (the general path); an int whose
	// bytes are the entries' signature.
	p := pk{opProto, 4}.op(opEmptyDict, opMemoize, opMark)
	p = p.str("segments").op(opMemoize, opEmptyList, opMemoize)                                      // 0..2
	p = p.str("device_traces").op(opMemoize, opEmptyList, opMemoize, opEmptyList, opMemoize, opMark) // 3..5
	p = p.op(opEmptyDict, opMemoize, opMark).str("action").op(opMemoize).str("alloc").op(opMemoize)  // 6, 7, 8
	p = p.str("addr").op(opMemoize).long(1<<40).str("size").op(opMemoize, opBinInt1, 1, opSetItems)  // 9, 10
	memo := 11
	var freeAt int // memo index of "free"
	for i := 1; i < 400; i++ {
		if i%100 == 0 {
			p = p.op(opAppends, opMark)
		}
		p = p.op(opEmptyDict, opMemoize, opMark, opBinGet, 7)
		memo++
		switch {
		case i == 40:
			p = p.str("free").op(opMemoize)
			freeAt = memo
			memo++
		case i > 40 && i%2 == 0:
			p = p.op(opBinGet, byte(freeAt))
		default:
			p = p.op(opBinGet, 8)
		}
		if i%7 == 0 {
			p = p.op(opFrame, 0, 0, 1, 0, 0, 0, 0, 0)
		}
		p = p.op(opBinGet, 9).long(1<<40 + uint64(i)*512)
		if i%50 == 0 {
			p = p.str("frames").op(opMemoize, opEmptyList, opMemoize)
			memo += 2
		}
		if i == 123 {
			// A value holding the signature's bytes.
			p = p.str("x").op(opMemoize, opBinFloat, opEmptyDict, opMemoize, opMark, opBinGet, 7, 0, 0, 0)
			memo++
		}
		p = p.op(opBinGet, 10, opBinInt2, byte(i), 1, opSetItems)
	}
	full := p.op(opAppends, opAppend, opSetItems, opStop)
	for _, tune := range []*ParallelTuning{{After: 1, ChunkBytes: 64}, {After: 3, ChunkBytes: 97}, {After: 2, ChunkBytes: 400}} {
		want, wdoc, _, werr := decodePar(full, 1, nil)
		got, gdoc, st, gerr := decodePar(full, 3, tune)
		if werr != nil {
			t.Fatal(werr)
		}
		if diff := sameDecode(want, got, wdoc, gdoc, werr, gerr); diff != "" {
			t.Fatalf("%+v: %s", *tune, diff)
		}
		if len(want.entries) != 400 || st.Chunks < 5 || st.Entries < 200 {
			t.Errorf("%+v: %d entries, the workers decoded %d (%+v)", *tune, len(want.entries), st.Entries, st)
		}
		for cut := 1; cut < len(full); cut += 37 {
			want, wdoc, _, werr := decodePar(full[:cut], 1, nil)
			got, gdoc, _, gerr := decodePar(full[:cut], 3, tune)
			if diff := sameDecode(want, got, wdoc, gdoc, werr, gerr); diff != "" {
				t.Fatalf("%+v, cut at %d: %s", *tune, cut, diff)
			}
		}
	}
}

// FuzzParallel checks that decoding on workers never changes what a
// streamed decode gives: the same entries, values, strings and error, for
// a handler that takes no lists and for one that does (ParallelLists).
func FuzzParallel(f *testing.F) {
	for _, p := range fastEntriesSeeds() {
		f.Add([]byte(p), uint16(40))
	}
	f.Add([]byte(stackSnapshot(300, 3)), uint16(40))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint16) {
		tune := &ParallelTuning{After: uint32(chunk % 5), ChunkBytes: 8 + int(chunk)%512}
		want, wdoc, _, werr := decodePar(data, 1, nil)
		var got *parRecorder
		var gdoc *Doc
		var gerr error
		// The workers' chunks each cost a Doc and a handler besides.
		n := allocated(func() { got, gdoc, _, gerr = decodePar(data, 3, tune) })
		if bound := memoryBound(data, budgetFloor+budgetRatio*int64(len(data))); n > bound {
			t.Fatalf("%d bytes allocated for %d bytes of input, more than %d", n, len(data), bound)
		}
		if diff := sameDecode(want, got, wdoc, gdoc, werr, gerr); diff != "" {
			t.Fatal(diff)
		}
		wantL, wdoc, _, werr := decodeLists(data, 1, nil)
		gotL, gdoc, _, gerr := decodeLists(data, 3, tune)
		if diff := sameDecode(&wantL.parRecorder, &gotL.parRecorder, wdoc, gdoc, werr, gerr); diff != "" {
			t.Fatal("taking lists:", diff)
		}
	})
}

// TestFetchableLocalMemo checks that a chunk's entry that fetched a string
// the decoder memoized after its last store of the memo (DecodeDoc works
// on its own copy) is left to redo, not a cut of the chunk: the chunk
// keeps its entries.
func TestFetchableLocalMemo(t *testing.T) {
	d := NewDecoder(nil)
	str, _ := strValue(3)
	d.memo = []Value{str, str} // as of the last store
	memo := []Value{str, str, tagMask, str, tagMask | 1}
	for _, tc := range []struct {
		miss uint64
		keep bool
	}{
		{3 | missKey, true},  // a string key, in memo past d.memo
		{3, true},            // a string value
		{2 | missKey, false}, // an entry, not a string
		{1 << 20, false},     // past everything memoized
	} {
		ch := &parChunk{n: 5, end: 100, memo: make([]Value, 10), ops: []uint32{5},
			defers: []deferral{{k: 2, off: 40, m0: 4, ops: 0, misses: []uint64{tc.miss}}}}
		d.fetchable(ch, memo)
		if kept := ch.n == 5 && len(ch.defers) == 1; kept != tc.keep {
			t.Errorf("miss %#x: chunk of %d entries, %d left, want kept %v", tc.miss, ch.n, len(ch.defers), tc.keep)
		}
		if !tc.keep && (ch.n != 2 || ch.end != 40 || len(ch.memo) != 4) {
			t.Errorf("miss %#x: cut to %d entries ending at %d with %d memo entries, want 2, 40, 4", tc.miss, ch.n, ch.end, len(ch.memo))
		}
	}
}

// readyRecorder is a parRecorder that is ready for the workers once an
// entry has had the value ready, or never when ready is "".
type readyRecorder struct {
	parRecorder
	ready string
	calls int
}

func (r *readyRecorder) ReadyForWorkers() bool {
	r.calls++
	return r.ready != "" && strings.Contains(r.entries[len(r.entries)-1], "="+r.ready+":")
}

// newStrSnapshot returns a snapshot of n entries {action, addr, note}:
// action "alloc", and from entry free on, every other one "free" (first
// met there, then fetched from the memo); note a new "N/A" string object
// in every entry, as PyTorch writes compile_context.
func newStrSnapshot(n, free int) pk {
	p := pk{opProto, 4}.op(opEmptyDict, opMemoize, opMark)
	p = p.str("segments").op(opMemoize, opEmptyList, opMemoize)                                      // 0..2
	p = p.str("device_traces").op(opMemoize, opEmptyList, opMemoize, opEmptyList, opMemoize, opMark) // 3..5
	p = p.op(opEmptyDict, opMemoize, opMark).str("action").op(opMemoize).str("alloc").op(opMemoize)  // 6, 7, 8
	p = p.str("addr").op(opMemoize).long(1<<40).str("note").op(opMemoize).str("N/A").op(opMemoize, opSetItems)
	memo, freeAt := 12, 0 // "note" is 10, the first "N/A" 11
	for i := 1; i < n; i++ {
		if i%1000 == 0 {
			p = p.op(opAppends, opMark)
		}
		p = p.op(opEmptyDict, opMemoize, opMark, opLongBinGet).op(le32(7)...)
		memo++
		switch {
		case i == free:
			p = p.str("free").op(opMemoize)
			freeAt = memo
			memo++
		case i > free && i%2 == 0:
			p = p.op(opLongBinGet).op(le32(freeAt)...)
		default:
			p = p.op(opLongBinGet).op(le32(8)...)
		}
		p = p.op(opLongBinGet).op(le32(9)...).long(1<<40 + uint64(i)*512)
		p = p.op(opLongBinGet).op(le32(10)...).str("N/A").op(opMemoize, opSetItems)
		memo++
	}
	return p.op(opAppends, opAppend, opSetItems, opStop)
}

func le32(x int) []byte { return []byte{byte(x), byte(x >> 8), byte(x >> 16), byte(x >> 24)} }

// TestParallelLaunch checks when the workers start by default: after
// parLaunch entries for a plain ParallelHandler; once a ParallelReady is
// ready, all at once, none of the entries redone (the action new since
// the launch is known to every chunk); after parLaunchMax entries for
// one never ready. The chunks' strings interned at the launch keep their
// indexes ("N/A", new in every entry, is none of a chunk's own). Every
// decode is the sequential one's.
func TestParallelLaunch(t *testing.T) {
	const n, free = 40000, 1500
	data := newStrSnapshot(n, free)
	if len(data) < parMinBytes+free*50 {
		t.Fatalf("the snapshot is %d bytes: too small for the workers", len(data))
	}
	want, wdoc, _, werr := decodePar(data, 1, nil)
	if werr != nil || len(want.entries) != n {
		t.Fatalf("sequential decode: %d entries, %v", len(want.entries), werr)
	}
	for _, tc := range []struct {
		name     string
		h        ParallelHandler
		launchAt int // the entries before the launch
	}{
		{"plain", &parRecorder{}, parLaunch},
		{"ready", &readyRecorder{ready: "free"}, free + 1},
		{"never ready", &readyRecorder{}, parLaunchMax},
	} {
		d := NewDecoder(data)
		d.Workers = 4
		var rec *parRecorder
		switch h := tc.h.(type) {
		case *parRecorder:
			rec = h
		case *readyRecorder:
			rec = &h.parRecorder
		}
		rec.recorder = recorder{doc: d.Doc(), kinds: true}
		d.StreamEntries("device_traces", tc.h)
		gdoc, gerr := d.DecodeDoc()
		if diff := sameDecode(want, rec, wdoc, gdoc, werr, gerr); diff != "" {
			t.Fatalf("%s: %s", tc.name, diff)
		}
		st := d.ParallelStats()
		// The entries the workers took: all but the first launchAt, less
		// the few that the chunks' signature search skips.
		if st.Workers != 4 || st.Entries > int64(n-tc.launchAt) || st.Entries < int64(n-tc.launchAt)*9/10 {
			t.Errorf("%s: the workers decoded %d of the %d entries after the launch (%+v)", tc.name, st.Entries, n-tc.launchAt, st)
		}
		if tc.name == "ready" && (st.Redone != 0 || !d.allAtOnce) {
			t.Errorf("%s: %d entries redone, all at once %v; want none redone, all at once", tc.name, st.Redone, d.allAtOnce)
		}
		if r, ok := tc.h.(*readyRecorder); ok && r.calls == 0 {
			t.Errorf("%s: ReadyForWorkers never called", tc.name)
		}
		// Before the launch, the plain handler's decode has not met "free".
		if own := rec.own; own > 1 || own == 1 && tc.name != "plain" {
			t.Errorf("%s: a chunk had %d strings of its own, want none but one met after the launch", tc.name, own)
		}
	}
}

// TestSizeTables checks that a streamed decode starts with small tables
// and a decode of the whole tree with tables for the input's first 256
// KiB, and that both decode the same values.
func TestSizeTables(t *testing.T) {
	data := newStrSnapshot(20000, 100)
	streamed, sdoc, _, err := decodePar(data, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := cap(sdoc.kinds); c != 4096 {
		t.Errorf("streamed: kinds of capacity %d, want 4096", c)
	}
	if c := cap(sdoc.items); c != 16384 {
		t.Errorf("streamed: items of capacity %d, want 16384", c)
	}
	d := NewDecoder(data)
	doc, err := d.DecodeDoc()
	if err != nil {
		t.Fatal(err)
	}
	if c := cap(doc.kinds); c < initialBytes/8 {
		t.Errorf("whole tree: kinds of capacity %d, want at least %d", c, initialBytes/8)
	}
	// The streamed entries are the tree's dicts.
	traces, _ := doc.Get(doc.Root(), "device_traces")
	if n := doc.Len(doc.Slice(traces)[0]); n != len(streamed.entries) || n != 20000 {
		t.Errorf("the tree has %d entries, the streamed decode %d", n, len(streamed.entries))
	}
}

// reserveMore grows s's capacity to what the rest of the input needs (rest
// bytes) if it grows as it did from length was over the last span bytes;
// s is left as it is when it has not outgrown first, its first size.
func reserveMore[T any](s []T, was int, span float64, rest, first int) []T {
	return withRoom(s, moreRoom(s, was, span, rest, first))
}

// TestReserveMore checks when reserveMore sizes a table for the rest of
// the input: only once it has outgrown its first size and grew over the
// span, to its length plus the rest at that rate with a fifth more, its
// values kept.
func TestReserveMore(t *testing.T) {
	s := make([]Value, 5000, 6000)
	for i := range s {
		s[i] = Value(i)
	}
	for _, c := range []struct {
		s         []Value
		was, cap0 int
	}{
		{s[:100], 10, 6000},    // not outgrown its first size (1000)
		{s, 5000, 6000},        // grew nothing over the span
		{s[:4000], 4100, 6000}, // shrank
	} {
		if got := reserveMore(c.s, c.was, 1<<20, 10<<20, 1000); cap(got) != c.cap0 || len(got) != len(c.s) {
			t.Errorf("len %d, was %d: capacity %d, want it left at %d", len(c.s), c.was, cap(got), c.cap0)
		}
	}
	got := reserveMore(s, 4000, 1<<20, 10<<20, 1000) // 1,000 more a MiB, 10 MiB left
	if want := 5000 + 12000 + 1024; cap(got) != want || len(got) != 5000 {
		t.Errorf("capacity %d and length %d, want %d and 5000", cap(got), len(got), want)
	}
	for i, v := range got {
		if v != Value(i) {
			t.Fatalf("value %d is %d after the copy", i, v)
		}
	}
	roomy := make([]Value, 5000, 8000)
	if got := reserveMore(roomy, 4999, 1<<20, 1000, 1000); cap(got) != 8000 {
		t.Errorf("capacity %d for a need within it, want it left at 8000", cap(got))
	}
}
