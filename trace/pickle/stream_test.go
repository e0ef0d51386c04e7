package pickle

import (
	"errors"
	"fmt"
	"reflect"
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
}

func (r *recorder) NewEntry(n uint32, off int) {
	if int(n) != len(r.entries) {
		panic(fmt.Sprintf("entry %d after %d", n, len(r.entries)))
	}
	r.entries = append(r.entries, "")
}

func (r *recorder) SetEntry(n uint32, kv []Value) error {
	for i := 0; i < len(kv); i += 2 {
		k, _ := r.doc.Str(kv[i])
		var v string
		switch r.doc.Kind(kv[i+1]) {
		case KindString:
			v, _ = r.doc.Str(kv[i+1])
		case KindList:
			v = fmt.Sprintf("list of %d", r.doc.Len(kv[i+1]))
		default:
			x, _ := r.doc.Int(kv[i+1])
			v = fmt.Sprint(x)
		}
		r.entries[n] += k + "=" + v + " "
	}
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
