package pickle

import "testing"

// TestMemoOldHot checks memoOldAt's cache of compacted memo entries: an
// entry fetched, stored again by a PUT and fetched again gives the value
// stored, and entries whose indexes share a cache slot give their own.
func TestMemoOldHot(t *testing.T) {
	p := pk{opProto, 4, opMark}
	for i := range 600 {
		p = p.op(opBinInt, byte(i), byte(i>>8), 0, 0, opMemoize, opPop)
	}
	for range 20 { // padding, for the memo to be compacted
		p = p.op(opNone, opPop)
	}
	// Fetch 5, 5+256 and 5 again (one cache slot), store 7 at 5, fetch 5.
	p = p.op(opLongBinGet, 5, 0, 0, 0, opLongBinGet, 5, 1, 0, 0, opLongBinGet, 5, 0, 0, 0)
	p = p.op(opBinInt1, 7, opLongBinPut, 5, 0, 0, 0, opPop, opLongBinGet, 5, 0, 0, 0, opTuple, opStop)
	d := NewDecoder(p)
	tinyMemo(d)
	doc, err := d.DecodeDoc()
	if err != nil {
		t.Fatal(err)
	}
	if d.memoBase < 300 {
		t.Fatalf("memoBase %d: entry 261 was not compacted", d.memoBase)
	}
	v, err := doc.ToAny(doc.Root())
	if err != nil {
		t.Fatal(err)
	}
	want := Tuple{int64(5), int64(261), int64(5), int64(7)}
	if got, ok := v.(Tuple); !ok || len(got) != len(want) {
		t.Fatalf("decoded %v, want %v", v, want)
	}
	for i, x := range v.(Tuple) {
		if x != want[i] {
			t.Errorf("item %d: %v, want %v", i, x, want[i])
		}
	}
}
