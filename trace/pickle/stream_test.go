package pickle

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// pk builds a pickle from opcodes and arguments.
type pk []byte

func (p pk) op(ops ...byte) pk { return append(p, ops...) }

func (p pk) str(s string) pk { return append(append(p, opShortBinUni, byte(len(s))), s...) }

func (p pk) long(x uint64) pk {
	b := []byte{opLong1, 8}
	for i := 0; i < 8; i++ {
		b = append(b, byte(x>>(8*i)))
	}
	return append(p, b...)
}

// recorder is an EntryHandler that renders each entry's pairs as text.
type recorder struct {
	doc     *Doc
	entries []string
	kinds   bool // each value's kind too
}

func (r *recorder) NewEntry(n uint32, off int) {
	if int(n) != len(r.entries) {
		panic(fmt.Sprintf("entry %d after %d", n, len(r.entries)))
	}
	r.entries = append(r.entries, "")
}

func (r *recorder) SetEntry(n uint32, kv []Value) error {
	// (Built with strconv, not fmt: the real-corpus tests record
	// hundreds of thousands of entries, under the race detector.)
	var b strings.Builder
	b.WriteString(r.entries[n])
	for i := 0; i < len(kv); i += 2 {
		k, _ := r.doc.Str(kv[i])
		b.WriteString(k)
		b.WriteByte('=')
		switch r.doc.Kind(kv[i+1]) {
		case KindString:
			v, _ := r.doc.Str(kv[i+1])
			b.WriteString(v)
		case KindList:
			b.WriteString("list of ")
			b.WriteString(strconv.Itoa(r.doc.Len(kv[i+1])))
		default:
			if f, ok := r.doc.Float(kv[i+1]); ok && r.doc.Kind(kv[i+1]) == KindFloat {
				b.WriteString(fmt.Sprint(f))
			} else {
				x, _ := r.doc.Int(kv[i+1])
				b.WriteString(strconv.FormatInt(x, 10))
			}
		}
		if r.kinds {
			b.WriteByte(':')
			b.WriteString(r.doc.Kind(kv[i+1]).String())
		}
		b.WriteByte(' ')
	}
	r.entries[n] = b.String()
	return nil
}

// snapshot returns a pickle of {"segments": [], "device_traces": [[e0, e1, e2]]}
// whose entries share memoized strings, a memoized big int (memoized in
// e0, got again in e2) and a memoized list, as a pickler writes them.
func streamSnapshot() pk {
	p := pk{opProto, 4}.op(opEmptyDict, opMemoize, opMark)
	p = p.str("segments").op(opMemoize, opEmptyList, opMemoize) // memo 0..2
	p = p.str("device_traces").op(opMemoize, opEmptyList, opMemoize, opEmptyList, opMemoize, opMark)
	// memo 3: key, 4: outer, 5: device list
	p = p.op(opEmptyDict, opMemoize, opMark).str("action").op(opMemoize).str("alloc").op(opMemoize) // 6 entry, 7, 8
	p = p.str("addr").op(opMemoize).long(1 << 40).op(opMemoize)                                     // 9, 10: the int
	p = p.str("frames").op(opMemoize, opEmptyList, opMemoize, opBinInt1, 3, opAppend, opSetItems)   // 11 key, 12 list
	p = p.op(opEmptyDict, opMemoize, opMark, opBinGet, 7).str("free_requested").op(opMemoize)       // 13 entry, 14
	p = p.op(opBinGet, 9).long(1<<40 + 512).op(opSetItems)
	p = p.op(opEmptyDict, opMemoize, opMark, opBinGet, 7, opBinGet, 8, opBinGet, 9, opBinGet, 10) // 15 entry
	p = p.op(opBinGet, 11, opBinGet, 12, opSetItems)
	p = p.op(opAppends, opAppend, opSetItems, opStop)
	return p
}

// TestStreamEntries checks that the entries of a streamed list reach the
// handler with their values (memoized ones included), that they take no
// room in the value table, and that the rest of the pickle decodes as usual.
func TestStreamEntries(t *testing.T) {
	data := streamSnapshot()
	plain, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder(data)
	r := &recorder{doc: d.Doc()}
	d.StreamEntries("device_traces", r)
	doc, err := d.DecodeDoc()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"action=alloc addr=1099511627776 frames=list of 1 ",
		"action=free_requested addr=1099511628288 ",
		"action=alloc addr=1099511627776 frames=list of 1 ",
	}
	if !reflect.DeepEqual(r.entries, want) {
		t.Errorf("entries %q\nwant %q", r.entries, want)
	}
	// Whole dicts decoded: the same entries.
	traces, _ := plain.(*Dict).Get("device_traces")
	if n := len(traces.(*List).Items[0].(*List).Items); n != 3 {
		t.Fatalf("plain decode: %d entries", n)
	}
	// The device list holds the entries' Values, numbered in order.
	root := doc.Root()
	dt, ok := doc.Get(root, "device_traces")
	if !ok {
		t.Fatal("no device_traces")
	}
	devs := doc.Slice(dt)
	if len(devs) != 1 || doc.Kind(devs[0]) != KindList {
		t.Fatalf("device_traces holds %d values", len(devs))
	}
	for i, v := range doc.Slice(devs[0]) {
		if n, ok := doc.Entry(v); !ok || int(n) != i || doc.Kind(v) != KindDict || doc.Len(v) != 0 {
			t.Errorf("item %d: entry %d %v, kind %s", i, n, ok, doc.Kind(v))
		}
	}
	if _, err := doc.ToAny(dt); err == nil {
		t.Error("ToAny of the streamed entries did not fail")
	}
	segs, _ := doc.Get(root, "segments")
	if got, err := doc.ToAny(segs); err != nil || len(got.(*List).Items) != 0 {
		t.Errorf("segments %v, %v", got, err)
	}
	// Kept: the containers (root, segments, the two lists, the frames
	// list) and the memoized big int; the second entry's int is dropped.
	if n := doc.NumValues(); n > 6 {
		t.Errorf("%d values in the table, want at most 6", n)
	}
}

// TestStreamEntriesSafety checks that streaming keeps the decoder exactly
// as strict: a refused opcode inside an entry is refused, with its offset.
func TestStreamEntriesSafety(t *testing.T) {
	data := streamSnapshot()
	// Replace the first entry's "alloc" string by a GLOBAL opcode.
	evil := append(pk{}, data[:len(data)-1]...)
	i := len(pk{opProto, 4}.op(opEmptyDict, opMemoize, opMark).str("segments").op(opMemoize, opEmptyList, opMemoize).str("device_traces").op(opMemoize, opEmptyList, opMemoize, opEmptyList, opMemoize, opMark).op(opEmptyDict, opMemoize, opMark).str("action").op(opMemoize))
	evil[i] = opGlobal
	d := NewDecoder(evil)
	r := &recorder{doc: d.Doc()}
	d.StreamEntries("device_traces", r)
	_, err := d.DecodeDoc()
	var pe *Error
	if !errors.Is(err, ErrUnsafe) || !errors.As(err, &pe) || pe.Offset != int64(i) {
		t.Fatalf("err %v, want ErrUnsafe at %d", err, i)
	}
}

// TestLong1 checks the one-load LONG1 path against decodeLong for every
// length up to 8 bytes, positive and negative, small and wide.
func TestLong1(t *testing.T) {
	vals := []int64{0, 1, -1, 127, 128, -128, -129, 255, 1 << 29, 1<<30 - 1, 1 << 30, -1 << 30,
		1<<31 - 1, 1 << 40, -1 << 40, 1<<55 + 3, -(1<<55 + 3), 1<<63 - 1, -1 << 63}
	p := pk{opProto, 2, opEmptyList, opMark}
	var want []int64
	for _, v := range vals {
		for n := 1; n <= 8; n++ {
			sh := uint(64 - 8*n)
			if v<<sh>>sh != v {
				continue // does not fit in n bytes
			}
			p = append(p, opLong1, byte(n))
			for i := 0; i < n; i++ {
				p = append(p, byte(uint64(v)>>(8*i)))
			}
			want = append(want, v)
		}
	}
	p = p.op(opAppends, opStop)
	doc, err := NewDecoder(p).DecodeDoc()
	if err != nil {
		t.Fatal(err)
	}
	items := doc.Slice(doc.Root())
	if len(items) != len(want) {
		t.Fatalf("%d items, want %d", len(items), len(want))
	}
	for i, w := range want {
		if got, ok := doc.Int(items[i]); !ok || got != w || doc.Kind(items[i]) != KindInt {
			t.Errorf("item %d: %d %v %s, want %d", i, got, ok, doc.Kind(items[i]), w)
		}
	}
}

// decodeStreamed decodes data with its device_traces entries streamed to a
// recorder, through fastEntry or not.
func decodeStreamed(data []byte, noFast bool) (*recorder, *Doc, error) {
	return decodeWith(data, noFast, false)
}

// tinyMemo makes d compact its memo every 16 bytes into blocks of 4.
func tinyMemo(d *Decoder) {
	d.memoShift, d.compactAt, d.checkEvery = 2, 8, 16
}

// decodeWith is decodeStreamed, the memo compacted at every occasion when
// tiny is set.
func decodeWith(data []byte, noFast, tiny bool) (*recorder, *Doc, error) {
	d := NewDecoder(data)
	d.noFast = noFast
	if tiny {
		tinyMemo(d)
	}
	r := &recorder{doc: d.Doc(), kinds: true}
	d.StreamEntries("device_traces", r)
	doc, err := d.DecodeDoc()
	return r, doc, err
}

// fastEntriesSeeds are snapshots whose entries take fastEntry's path, and
// ones it must leave to the general path partway through an entry.
func fastEntriesSeeds() []pk {
	head := func() pk {
		p := pk{opProto, 4}.op(opEmptyDict, opMemoize, opMark)
		p = p.str("segments").op(opMemoize, opEmptyList, opMemoize)                                         // memo 0..2
		return p.str("device_traces").op(opMemoize, opEmptyList, opMemoize, opEmptyList, opMemoize, opMark) // 3..5
	}
	tail := func(p pk) pk { return p.op(opAppends, opAppend, opSetItems, opStop) }
	// Every value kind fastEntry takes, keys new and memoized.
	p := head().op(opEmptyDict, opMemoize, opMark).str("action").op(opMemoize).str("alloc").op(opMemoize) // 6 entry, 7, 8
	p = p.str("addr").op(opMemoize).long(1 << 40)                                                         // 9
	p = p.str("size").op(opMemoize, opBinInt, 0, 2, 0, 0)                                                 // 10
	p = p.str("stream").op(opMemoize, opBinInt1, 0)                                                       // 11
	p = p.str("time_us").op(opMemoize, opLong1, 3, 1, 2, 3)                                               // 12
	p = p.str("neg").op(opMemoize, opBinInt, 0xff, 0xff, 0xff, 0xff)                                      // 13
	p = p.str("none").op(opMemoize, opNone)                                                               // 14
	p = p.str("t").op(opMemoize, opNewTrue).str("f").op(opMemoize, opNewFalse)                            // 15, 16
	p = p.str("x").op(opMemoize, opBinFloat, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0)                                // 17
	p = p.str("w").op(opMemoize, opBinInt2, 0xff, 0xff, opSetItems)                                       // 18
	p = p.op(opEmptyDict, opMemoize, opMark, opBinGet, 7).str("free_requested").op(opMemoize)             // 19 entry, 20
	p = p.op(opBinGet, 9, opLongBinGet, 20, 0, 0, 0, opLongBinGet, 10, 0, 0, 0, opBinGet, 8, opSetItems)
	full := tail(p)
	// A FRAME between two pairs, a list value, a memoized big int, a
	// memoized entry as a value: the general path takes over.
	q := head().op(opEmptyDict, opMemoize, opMark).str("action").op(opMemoize).str("alloc").op(opMemoize) // 6, 7, 8
	q = q.op(opFrame, 9, 0, 0, 0, 0, 0, 0, 0).str("addr").op(opMemoize).long(1 << 41).op(opMemoize)       // 9, 10
	q = q.str("frames").op(opMemoize, opEmptyList, opMemoize, opSetItems)                                 // 11, 12
	q = q.op(opEmptyDict, opMemoize, opMark, opBinGet, 7, opBinGet, 8, opBinGet, 9, opBinGet, 10)         // 13
	q = q.op(opBinGet, 11, opBinGet, 12, opBinGet, 7, opBinGet, 13, opSetItems)
	mixed := tail(q)
	return []pk{full, mixed, streamSnapshot()}
}

// TestFastEntries checks that entries decoded by fastEntry reach the
// handler exactly as through the general path, leave the same Doc, and
// that input fastEntry gives up on partway decodes the same too.
func TestFastEntries(t *testing.T) {
	for i, data := range fastEntriesSeeds() {
		slow, sdoc, serr := decodeStreamed(data, true)
		fast, fdoc, ferr := decodeWith(data, false, i%2 == 0)
		if serr != nil || ferr != nil {
			t.Fatalf("seed %d: errors %v, %v", i, serr, ferr)
		}
		if !reflect.DeepEqual(slow.entries, fast.entries) {
			t.Errorf("seed %d: entries\n%q\n%q", i, fast.entries, slow.entries)
		}
		if sdoc.NumValues() != fdoc.NumValues() || sdoc.NumStrings() != fdoc.NumStrings() {
			t.Errorf("seed %d: %d values and %d strings, general path %d and %d", i, fdoc.NumValues(), fdoc.NumStrings(), sdoc.NumValues(), sdoc.NumStrings())
		}
	}
	fast, _, _ := decodeStreamed(fastEntriesSeeds()[0], false)
	want := []string{
		"action=alloc:str addr=1099511627776:int size=512:int stream=0:int time_us=197121:int neg=-1:int none=0:None t=1:bool f=0:bool x=1:float w=65535:int ",
		"action=free_requested:str addr=free_requested:str size=alloc:str ",
	}
	if !reflect.DeepEqual(fast.entries, want) {
		t.Errorf("entries\n%q\nwant\n%q", fast.entries, want)
	}
	// Cut anywhere: the same error at the same offset.
	for i, data := range fastEntriesSeeds() {
		for n := range len(data) {
			_, _, serr := decodeStreamed(data[:n], true)
			_, _, ferr := decodeStreamed(data[:n], false)
			if fmt.Sprint(serr) != fmt.Sprint(ferr) {
				t.Fatalf("seed %d cut at %d: %v, general path %v", i, n, ferr, serr)
			}
		}
	}
}

// FuzzFastEntries checks that fastEntry never changes what a streamed
// decode gives: the same entries, values and error.
func FuzzFastEntries(f *testing.F) {
	for _, p := range fastEntriesSeeds() {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var slow, fast *recorder
		var sdoc, fdoc *Doc
		var serr, ferr error
		got := allocated(func() {
			slow, sdoc, serr = decodeStreamed(data, true)
			fast, fdoc, ferr = decodeWith(data, false, len(data)%2 == 0)
		})
		if bound := 2 * memoryBound(data, budgetFloor+budgetRatio*int64(len(data))); got > bound {
			t.Fatalf("%d bytes allocated for two decodes of %d bytes of input, more than %d", got, len(data), bound)
		}
		if fmt.Sprint(serr) != fmt.Sprint(ferr) {
			t.Fatalf("error %v, general path %v", ferr, serr)
		}
		checkTinyMemo(t, data)
		if serr != nil {
			return
		}
		if !reflect.DeepEqual(slow.entries, fast.entries) {
			t.Fatalf("entries\n%q\ngeneral path\n%q", fast.entries, slow.entries)
		}
		if sdoc.NumValues() != fdoc.NumValues() || sdoc.NumStrings() != fdoc.NumStrings() {
			t.Fatalf("%d values and %d strings, general path %d and %d", fdoc.NumValues(), fdoc.NumStrings(), sdoc.NumValues(), sdoc.NumStrings())
		}
	})
}

// TestFastEntriesReal checks fastEntry against the general path on the real
// H200 snapshots kept for the importer's tests, and on every *.pickle in
// $FRAGSIM_SNAPSHOT_DIR when set: the same entries, values and tables.
func TestFastEntriesReal(t *testing.T) {
	for name, data := range realSnapshots(t) {
		slow, sdoc, serr := decodeStreamed(data, true)
		fast, fdoc, ferr := decodeStreamed(data, false)
		if serr != nil || ferr != nil {
			t.Fatalf("%s: errors %v, %v", name, ferr, serr)
		}
		if tiny, _, err := decodeWith(data, false, true); err != nil || !reflect.DeepEqual(tiny.entries, slow.entries) {
			t.Errorf("%s: the memo compacted at every occasion: %v, or entries differ", name, err)
		}
		if len(fast.entries) == 0 || !reflect.DeepEqual(slow.entries, fast.entries) {
			t.Errorf("%s: %d entries differ from the general path's %d", name, len(fast.entries), len(slow.entries))
		}
		if sdoc.NumValues() != fdoc.NumValues() || sdoc.NumStrings() != fdoc.NumStrings() {
			t.Errorf("%s: %d values and %d strings, general path %d and %d", name, fdoc.NumValues(), fdoc.NumStrings(), sdoc.NumValues(), sdoc.NumStrings())
		}
	}
}

// checkTinyMemo decodes data whole (no streaming) with and without the memo
// compacted at every occasion: the same values or the same error.
func checkTinyMemo(t *testing.T, data []byte) {
	t.Helper()
	plain, perr := Decode(data)
	d := NewDecoder(data)
	tinyMemo(d)
	var tiny any
	doc, terr := d.DecodeDoc()
	if terr == nil {
		tiny, terr = doc.ToAny(doc.Root())
	}
	if fmt.Sprint(perr) != fmt.Sprint(terr) {
		t.Fatalf("compacted memo: error %v, plain %v", terr, perr)
	}
	if perr == nil && !sameValue(plain, tiny) {
		t.Fatalf("compacted memo: %v\nplain: %v", tiny, plain)
	}
}

// sameValue reports whether two decoded values are the same, floats bit
// for bit (reflect.DeepEqual finds a NaN unequal to itself). Like
// DeepEqual, it takes a pair of containers met again (a pickle may hold
// itself) as equal.
func sameValue(a, b any) bool { return sameIn(a, b, map[[2]any]bool{}) }

func sameIn(a, b any, seen map[[2]any]bool) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case Tuple:
		y, ok := b.(Tuple)
		return ok && sameAll(x, y, seen)
	case *List:
		y, ok := b.(*List)
		if !ok || seen[[2]any{x, y}] {
			return ok
		}
		seen[[2]any{x, y}] = true
		return sameAll(x.Items, y.Items, seen)
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || seen[[2]any{x, y}] {
			return ok
		}
		seen[[2]any{x, y}] = true
		if len(x.Pairs) != len(y.Pairs) {
			return false
		}
		for i, p := range x.Pairs {
			if p.Key != y.Pairs[i].Key || !sameIn(p.Value, y.Pairs[i].Value, seen) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func sameAll(a, b []any, seen map[[2]any]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameIn(a[i], b[i], seen) {
			return false
		}
	}
	return true
}

// TestMemoCompaction checks memo lookups, stores and holes below the
// compacted part, through every opcode that reads or writes the memo, in
// patterned and raw blocks.
func TestMemoCompaction(t *testing.T) {
	// A list of 200 ints memoized with MEMOIZE (a pattern: i), then
	// fetched back with BINGET and LONG_BINGET, then overwritten with
	// BINPUT and LONG_BINPUT below the compacted part, and a hole fetched.
	p := pk{opProto, 4, opEmptyList, opMemoize, opMark}
	for i := range 200 {
		p = p.op(opBinInt1, byte(i), opMemoize)
	}
	for _, i := range []int{1, 7, 100, 200} {
		p = p.op(opBinGet, byte(i))
	}
	p = p.op(opLongBinGet, 150, 0, 0, 0)
	p = p.op(opBinInt2, 0x34, 0x12, opBinPut, 9, opPop, opBinGet, 9)
	p = p.op(opBinInt2, 0x78, 0x56, opLongBinPut, 10, 0, 0, 0, opPop, opLongBinGet, 10, 0, 0, 0)
	p = p.op(opAppends, opStop)
	checkTinyMemo(t, p)
	got, err := Decode(p)
	if err != nil {
		t.Fatal(err)
	}
	items := got.(*List).Items
	if n := len(items); n != 200+5+2 || items[200] != int64(0) || items[203] != int64(199) || items[204] != int64(149) ||
		items[205] != int64(0x1234) || items[206] != int64(0x5678) {
		t.Fatalf("%d items, tail %v", len(items), items[195:])
	}
	// A hole below the compacted part is an error at the same offset.
	q := pk{opProto, 4, opEmptyList, opMark}
	for i := range 100 {
		q = q.op(opBinInt1, byte(i), opMemoize) // memo 0..99
	}
	q = q.op(opBinInt1, 1, opLongBinPut, 0, 1, 0, 0) // memo 256: 100..255 are holes
	for range 64 {
		q = q.op(opBinInt1, 2, opMemoize)
	}
	q = q.op(opLongBinGet, 99, 0, 0, 0) // fine
	ok := append(pk{}, q...).op(opAppends, opStop)
	checkTinyMemo(t, ok)
	if _, err := Decode(ok); err != nil {
		t.Fatal(err)
	}
	q = q.op(opLongBinGet, 200, 0, 0, 0, opAppends, opStop)
	checkTinyMemo(t, q)
	if _, err := Decode(q); err == nil || !strings.Contains(err.Error(), "memo index 200 was never stored") {
		t.Fatalf("hole fetched: %v", err)
	}
}

// TestTableLimits checks that a pickle that would overflow the decoder's
// tables fails with an error at the offset where it would, not a wrong
// decode.
func TestTableLimits(t *testing.T) {
	p := pk{opProto, 4, opEmptyList, opMark}
	for range 100 {
		p = p.op(opBinInt, 0, 0, 0, 0x80) // not inline: a table value each
	}
	p = p.op(opAppends, opStop)
	d := NewDecoder(p)
	d.checkEvery, d.maxValues = 50, 120
	_, err := d.DecodeDoc()
	var pe *Error
	if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) || pe.Offset < 50 || pe.Offset >= int64(len(p)) || !strings.Contains(err.Error(), "tables hold") {
		t.Fatalf("err %v", err)
	}
	if _, err := Decode(p); err != nil {
		t.Fatalf("with the real limits: %v", err)
	}
}

// TestEntryRuns checks that a streamed list of consecutive entries is kept
// as runs (no items), read back item by item as before, and that a list
// mixing entries with other values, or entries out of order, is read back
// in order and reported as no run.
func TestEntryRuns(t *testing.T) {
	entry := func(p pk) pk { return p.op(opEmptyDict, opMemoize, opMark).str("action").str("alloc").op(opSetItems) }
	head := func() pk {
		p := pk{opProto, 4}.op(opEmptyDict, opMemoize, opMark)
		return p.str("device_traces").op(opMemoize, opEmptyList, opMemoize, opEmptyList, opMemoize, opMark) // memo 0..3
	}
	// Two batches of entries (APPENDS twice), one APPEND of a third batch.
	p := head()
	for range 3 {
		p = entry(p)
	}
	p = p.op(opAppends, opMark)
	for range 2 {
		p = entry(p)
	}
	p = p.op(opAppends)
	p = entry(p).op(opAppend)
	p = p.op(opAppend, opSetItems, opStop)
	// The same with an int between the batches, and with the first entry
	// fetched again (memo 4) after the others.
	q := head()
	for range 3 {
		q = entry(q)
	}
	q = q.op(opAppends, opBinInt1, 7, opAppend, opMark)
	q = entry(q)
	q = q.op(opBinGet, 4, opAppends, opAppend, opSetItems, opStop)

	for i, tc := range []struct {
		data  pk
		runs  [][2]uint32 // nil: not runs
		items []string
	}{
		{p, [][2]uint32{{0, 6}}, []string{"e0", "e1", "e2", "e3", "e4", "e5"}},
		{q, nil, []string{"e0", "e1", "e2", "7", "e3", "e0"}},
	} {
		d := NewDecoder(tc.data)
		r := &recorder{doc: d.Doc()}
		d.StreamEntries("device_traces", r)
		doc, err := d.DecodeDoc()
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		dt, _ := doc.Get(doc.Root(), "device_traces")
		list := doc.Slice(dt)[0]
		var runs [][2]uint32
		ok := doc.EntryRuns(list, func(first, n uint32) bool { runs = append(runs, [2]uint32{first, n}); return true })
		if ok != (tc.runs != nil) || (ok && !reflect.DeepEqual(runs, tc.runs)) {
			t.Errorf("case %d: runs %v (%v), want %v", i, runs, ok, tc.runs)
		}
		var items []string
		for _, v := range doc.Slice(list) {
			if n, ok := doc.Entry(v); ok {
				items = append(items, fmt.Sprintf("e%d", n))
			} else {
				x, _ := doc.Int(v)
				items = append(items, fmt.Sprint(x))
			}
		}
		if !reflect.DeepEqual(items, tc.items) || doc.Len(list) != len(tc.items) {
			t.Errorf("case %d: items %v (len %d), want %v", i, items, doc.Len(list), tc.items)
		}
		if i == 0 && doc.NumValues() > 4 {
			t.Errorf("%d values in the table: the entries' list holds items", doc.NumValues())
		}
	}
}

// taker is an EntryHandler that takes every list value (as an importer
// takes a frames list), naming it by the entry that first had it, and
// renders each entry's list values: "L<len>" for a list, "T<id>" for a
// ticket.
type taker struct {
	dec     *Decoder
	entries []string
}

func (r *taker) NewEntry(n uint32, off int) { r.entries = append(r.entries, "") }

func (r *taker) SetEntry(n uint32, kv []Value) error {
	doc := r.dec.Doc()
	for i := 1; i < len(kv); i += 2 {
		v := kv[i]
		if id, ok := TicketID(v); ok {
			r.entries[n] += fmt.Sprintf("T%d ", id)
		} else if doc.Kind(v) == KindList {
			r.entries[n] += fmt.Sprintf("L%d ", doc.Len(v))
			r.dec.Take(v, n)
		}
	}
	return nil
}

// TestTake checks that a list an entry made and the handler took is
// dropped, its memo entry becoming a ticket that later entries get back,
// and that a list something else refers to is kept.
func TestTake(t *testing.T) {
	head := func() pk {
		p := pk{opProto, 4}.op(opEmptyDict, opMemoize, opMark)
		return p.str("device_traces").op(opMemoize, opEmptyList, opMemoize, opEmptyList, opMemoize, opMark) // memo 0..3
	}
	// Entry 0 makes a list of two ints (memo 6 after the entry's 4 and
	// the key's 5); entry 1 fetches it again; entry 2 makes one that the
	// stack below the entries also holds (DUP'd before the entry is set)
	// and so is kept.
	p := head().op(opEmptyDict, opMemoize, opMark).str("frames").op(opMemoize)                  // 4, 5
	p = p.op(opEmptyList, opMemoize, opMark, opBinInt1, 1, opBinInt1, 2, opAppends, opSetItems) // 6
	p = p.op(opEmptyDict, opMemoize, opMark, opBinGet, 5, opBinGet, 6, opSetItems)              // 7
	p = p.op(opAppends)
	ok := append(pk{}, p...).op(opAppend, opSetItems, opStop)

	d := NewDecoder(ok)
	r := &taker{dec: d}
	d.StreamEntries("device_traces", r)
	doc, err := d.DecodeDoc()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"L2 ", "T0 "}; !reflect.DeepEqual(r.entries, want) {
		t.Errorf("entries %q, want %q", r.entries, want)
	}
	if n := doc.NumValues(); n != 3 {
		t.Errorf("%d values kept, want 3 (the root and the two lists of device_traces)", n)
	}
	// The ticket anywhere else fails the decode's reading.
	bad := append(pk{}, p...).op(opAppend).str("other").op(opBinGet, 6, opSetItems, opStop)
	d = NewDecoder(bad)
	r = &taker{dec: d}
	d.StreamEntries("device_traces", r)
	if doc, err = d.DecodeDoc(); err != nil {
		t.Fatal(err)
	}
	other, _ := doc.Get(doc.Root(), "other")
	if _, err := doc.ToAny(other); err == nil {
		t.Error("ToAny of a ticket did not fail")
	}
	// A list another container also took during the entry is kept whole:
	// "keep" (memo 4, made before the entries' list) gets it as an item.
	q := pk{opProto, 4}.op(opEmptyDict, opMemoize, opMark)
	q = q.str("keep").op(opMemoize, opEmptyList, opMemoize)                                          // 0 root, 1, 2
	q = q.str("device_traces").op(opMemoize, opEmptyList, opMemoize, opEmptyList, opMemoize, opMark) // 3, 4, 5
	q = q.op(opEmptyDict, opMemoize, opMark).str("frames").op(opMemoize)                             // 6, 7
	q = q.op(opEmptyList, opMemoize, opMark, opBinInt1, 3, opAppends)                                // 8
	q = q.op(opBinGet, 2, opBinGet, 8, opAppend, opPop, opSetItems, opAppends, opAppend)             // keep gets it
	q = q.op(opSetItems, opStop)
	d = NewDecoder(q)
	r = &taker{dec: d}
	d.StreamEntries("device_traces", r)
	if doc, err = d.DecodeDoc(); err != nil {
		t.Fatal(err)
	}
	if v, _ := d.memoGet(8); v&tagMask == tagMask {
		t.Errorf("a list another container holds was taken: memo 8 is %#x", v)
	}
	keep, _ := doc.Get(doc.Root(), "keep")
	if got, err := doc.ToAny(keep); err != nil || fmt.Sprint(plain(t, got)) != "[[3]]" {
		t.Errorf("keep = %v (%v), want [[3]]", plain(t, got), err)
	}
	// A list below its entry on the stack is kept: the entry (memo 4) and
	// the int below it are popped, the list made, and the entry pushed
	// again from the memo, where it was made.
	b := head().op(opBinInt1, 9, opEmptyDict, opMemoize, opPop, opPop)     // 4
	b = b.op(opEmptyList, opMemoize, opMark, opBinInt1, 7, opAppends)      // 5
	b = b.op(opBinGet, 4, opMark).str("frames").op(opMemoize, opBinGet, 5) // 6
	b = b.op(opSetItems, opAppends, opAppend, opSetItems, opStop)
	d = NewDecoder(b)
	r = &taker{dec: d}
	d.StreamEntries("device_traces", r)
	if doc, err = d.DecodeDoc(); err != nil {
		t.Fatal(err)
	}
	v, _ := d.memoGet(5)
	if got, err := doc.ToAny(v); v&tagMask == tagMask || err != nil || fmt.Sprint(plain(t, got)) != "[7]" {
		t.Errorf("the list below the entry is %#x = %v (%v), want it kept: [7]", v, plain(t, got), err)
	}
	if want := []string{"L1 "}; !reflect.DeepEqual(r.entries, want) {
		t.Errorf("entries %q, want %q", r.entries, want)
	}
}

// TestTakeReal decodes the real snapshot with stacks with every frames
// list taken, the memo compacted at every occasion and not: the same
// entries, and most lists taken.
func TestTakeReal(t *testing.T) {
	data := realSnapshot(t, "../pytorch/testdata/real/stacks.pickle.gz")
	var got [2][]string
	for i, tiny := range []bool{false, true} {
		d := NewDecoder(data)
		if tiny {
			tinyMemo(d)
		}
		r := &taker{dec: d}
		d.StreamEntries("device_traces", r)
		if _, err := d.DecodeDoc(); err != nil {
			t.Fatal(err)
		}
		got[i] = r.entries
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Fatal("the entries differ with the memo compacted")
	}
	tickets := 0
	for _, e := range got[0] {
		if strings.Contains(e, "T") {
			tickets++
		}
	}
	if len(got[0]) != 783 || tickets < 200 {
		t.Errorf("%d entries, %d got a taken list back", len(got[0]), tickets)
	}
}

// TestMemoBlocks checks every block encoding against the values it was made
// of: patterns, classed blocks (entries in order, a constant, tickets,
// others), raw ones, and a store into each.
func TestMemoBlocks(t *testing.T) {
	e := func(n uint32) Value { return tagMask | Value(n) }
	str := inlineBit | strBit | 7
	var stacked []Value // entry, ticket, "N/A"; entry, "N/A"; ...
	for i := range 4096 / 5 {
		stacked = append(stacked, e(uint32(2*i)), Ticket(uint32(i%300)), str, e(uint32(2*i+1)), str)
	}
	stacked = stacked[:4096-1]
	stacked = append(stacked, 12345) // a table value: one "other"
	blocks := map[string][]Value{"stacked": stacked}
	var pattern, raw []Value
	for i := range 4096 {
		pattern = append(pattern, e(uint32(i/2)))
		if i%2 == 1 {
			pattern[i] = str
		}
		raw = append(raw, Value(i*7919%4093))
	}
	blocks["pattern"], blocks["raw"] = pattern, raw
	want := map[string]string{"stacked": "classed", "pattern": "pattern", "raw": "raw"}
	for name, vs := range blocks {
		b := compress(vs)
		kind := "pattern"
		switch {
		case b.raw != nil:
			kind = "raw"
		case b.cls != nil:
			kind = "classed"
		}
		if kind != want[name] {
			t.Errorf("%s: a %s block, want %s", name, kind, want[name])
		}
		for j, v := range vs {
			if got := b.at(uint64(j)); got != v {
				t.Fatalf("%s: value %d is %#x, want %#x", name, j, got, v)
			}
		}
		d := &Decoder{memoShift: memoBlockShift, memoOld: []memoBlock{b}}
		d.memoSetOld(100, 42)
		for j, v := range vs {
			if j == 100 {
				v = 42
			}
			if got := d.memoOldAt(uint64(j)); got != v {
				t.Fatalf("%s after a store: value %d is %#x, want %#x", name, j, got, v)
			}
		}
	}
}
