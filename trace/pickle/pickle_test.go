package pickle

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

// plain converts a decoded value to the form encoding/json decodes the
// generator's JSON into (tuples as lists, numbers as float64 unless exact).
func plain(t *testing.T, v any) any {
	switch x := v.(type) {
	case nil, bool, string, float64:
		return x
	case int64:
		return json.Number(fmt.Sprint(x))
	case uint64:
		return json.Number(fmt.Sprint(x))
	case Tuple:
		out := make([]any, len(x))
		for i := range x {
			out[i] = plain(t, x[i])
		}
		return out
	case *List:
		out := make([]any, len(x.Items))
		for i := range x.Items {
			out[i] = plain(t, x.Items[i])
		}
		return out
	case *Dict:
		out := make(map[string]any, x.Len())
		for _, p := range x.Pairs {
			out[p.Key] = plain(t, p.Value)
		}
		return out
	}
	t.Fatalf("unexpected decoded type %T", v)
	return nil
}

// normalizeFloats turns JSON numbers that are floats into float64 so that
// both sides compare equal.
func normalize(v any) any {
	switch x := v.(type) {
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			f, _ := x.Float64()
			return f
		}
		return x
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalize(x[k])
		}
	}
	return v
}

func TestDecodeMatchesPython(t *testing.T) {
	raw, err := os.ReadFile("testdata/values.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var want any
	if err := dec.Decode(&want); err != nil {
		t.Fatal(err)
	}
	want = normalize(want)
	for proto := 0; proto <= 5; proto++ {
		t.Run(fmt.Sprintf("protocol%d", proto), func(t *testing.T) {
			data, err := os.ReadFile(fmt.Sprintf("testdata/values.p%d.pickle", proto))
			if err != nil {
				t.Fatal(err)
			}
			v, err := Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			got := normalize(plain(t, v)).(map[string]any)
			w := map[string]any{}
			for k, x := range want.(map[string]any) {
				if k != "bytes" || proto >= 3 {
					w[k] = x
				}
			}
			for k := range w {
				if !reflect.DeepEqual(got[k], w[k]) {
					t.Errorf("key %s: got %.200v want %.200v", k, got[k], w[k])
				}
			}
			if !reflect.DeepEqual(got, w) {
				gj, _ := json.Marshal(got)
				wj, _ := json.Marshal(w)
				t.Fatalf("decoded value differs from Python's\n got %.400s\nwant %.400s", gj, wj)
			}
			d := v.(*Dict)
			// Types the JSON comparison cannot see.
			checks := map[string]any{
				"u64": uint64(math.MaxUint64), "u63": uint64(1<<63 + 5), "i64min": int64(math.MinInt64),
				"long9": int64(math.MaxInt64), "addr": int64(0x7f3a5c000000), "neg": int64(-1),
				"int32": int64(math.MinInt32),
			}
			if proto >= 3 {
				checks["bytes"] = "raw\x01bytes"
			}
			for k, w := range checks {
				if g, _ := d.Get(k); g != w {
					t.Errorf("%s = %#v (%T), want %#v (%T)", k, g, g, w, w)
				}
			}
			if tu, _ := d.Get("tuple"); !reflect.DeepEqual(tu, Tuple{int64(0), int64(0)}) {
				t.Errorf("tuple = %#v", tu)
			}
			// The memo shares one dict between two list slots.
			fr, _ := d.Get("frames")
			items := fr.(*List).Items
			if items[0].(*Dict) != items[1].(*Dict) || items[0].(*Dict) == items[2].(*Dict) {
				t.Errorf("memo sharing lost: %p %p %p", items[0], items[1], items[2])
			}
			// Dict order is insertion order.
			if keys := d.Keys(); keys[0] != "none" || keys[1] != "t" {
				t.Errorf("key order %v", keys[:2])
			}
		})
	}
}

const pwned = "/tmp/fragsim-pickle-pwned"

func TestRefusesCode(t *testing.T) {
	os.Remove(pwned)
	for _, name := range []string{"evil_reduce.p2.pickle", "evil_reduce.p4.pickle", "evil_reduce.p5.pickle"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Decode(data)
		if !errors.Is(err, ErrUnsafe) {
			t.Fatalf("%s: err = %v, want ErrUnsafe", name, err)
		}
		var pe *Error
		if !errors.As(err, &pe) || (pe.Op != opGlobal && pe.Op != opStackGlobal) {
			t.Fatalf("%s: error %v does not name the GLOBAL/STACK_GLOBAL opcode", name, err)
		}
		if data[pe.Offset] != pe.Op {
			t.Errorf("%s: offset %d does not hold opcode 0x%02x", name, pe.Offset, pe.Op)
		}
		if !strings.Contains(err.Error(), "GLOBAL") || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", pe.Offset)) {
			t.Errorf("message %q lacks opcode name or offset", err)
		}
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatalf("%s exists: the payload ran", pwned)
	}
	// Every opcode that constructs objects or calls code, on its own.
	for _, op := range []byte{opGlobal, opStackGlobal, opReduce, opBuild, opInst, opObj, opNewObj, opNewObjEx, opExt1, opExt2, opExt4, opPersID, opBinPersID} {
		data := []byte{opProto, 2, opNone, opNone, op, 0, 0, 0, 0, opStop}
		_, err := Decode(data)
		var pe *Error
		if !errors.As(err, &pe) || !errors.Is(err, ErrUnsafe) || pe.Offset != 4 || pe.Op != op {
			t.Errorf("opcode %s: err = %v, want ErrUnsafe at offset 4", OpName(op), err)
		}
		if !strings.Contains(err.Error(), OpName(op)) {
			t.Errorf("message %q does not name %s", err, OpName(op))
		}
	}
}

func TestTruncated(t *testing.T) {
	data, err := os.ReadFile("testdata/values.p4.pickle")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 2, 11, len(data) / 3, len(data) / 2, len(data) - 1} {
		_, err := Decode(data[:n])
		if !errors.Is(err, ErrTruncated) {
			t.Errorf("cut at %d: err = %v, want ErrTruncated", n, err)
		}
		var pe *Error
		if errors.As(err, &pe) && (pe.Offset < 0 || pe.Offset > int64(n)) {
			t.Errorf("cut at %d: offset %d outside the input", n, pe.Offset)
		}
	}
}

func TestMalformed(t *testing.T) {
	cases := map[string][]byte{
		"appends without mark":  {opProto, 2, opEmptyList, opAppends, opStop},
		"setitem on list":       {opProto, 2, opEmptyList, opNone, opNone, opSetItem, opStop},
		"get of unknown memo":   {opProto, 2, opBinGet, 9, opStop},
		"stop with two values":  {opProto, 2, opNone, opNone, opStop},
		"huge string length":    {opProto, 4, opBinUnicode8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 'a', opStop},
		"huge frame":            {opProto, 4, opFrame, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, opStop},
		"int too wide":          append([]byte{opProto, 2, opLong1, 10}, append(make([]byte, 9), 1, opStop)...),
		"list key":              {opProto, 2, opEmptyDict, opEmptyList, opNone, opSetItem, opStop},
		"unknown opcode":        {opProto, 2, 0xff, opStop},
		"protocol 6":            {opProto, 6, opNone, opStop},
		"odd setitems":          {opProto, 2, opEmptyDict, opMark, opNone, opSetItems, opStop},
		"dup on empty":          {opProto, 2, opDup, opStop},
		"tuple2 short":          {opProto, 2, opNone, opTuple2, opStop},
		"sparse memo put empty": {opProto, 2, opLongBinPut, 0xff, 0xff, 0xff, 0xff, opStop},
	}
	for name, data := range cases {
		v, err := Decode(data)
		if err == nil {
			t.Errorf("%s: decoded %#v, want an error", name, v)
			continue
		}
		if errors.Is(err, ErrUnsafe) {
			t.Errorf("%s: %v classed as unsafe", name, err)
		}
	}
}

func TestSparseMemoAndPop(t *testing.T) {
	// A far LONG_BINPUT index goes to the sparse map and is found again.
	data := []byte{opProto, 2, opBinInt1, 5, opLongBinPut, 0, 0, 0, 0x10, opPop, opLongBinGet, 0, 0, 0, 0x10, opStop}
	v, err := Decode(data)
	if err != nil || v != int64(5) {
		t.Fatalf("got %v, %v", v, err)
	}
	// POP_MARK discards everything above the mark.
	data = []byte{opProto, 2, opNone, opMark, opBinInt1, 1, opBinInt1, 2, opPopMark, opStop}
	v, err = Decode(data)
	if err != nil || v != nil {
		t.Fatalf("got %v, %v", v, err)
	}
}

func TestDeepNestingIsAnError(t *testing.T) {
	// Lists nested one in the next decode; turning them into Go values
	// stops past the depth bound with a *Error at the STOP opcode.
	nested := func(n int) []byte {
		data := []byte{opProto, 2}
		for range n {
			data = append(data, opEmptyList)
		}
		for range n - 1 {
			data = append(data, opAppend)
		}
		return append(data, opStop)
	}
	data := nested(maxDepth + 2)
	_, err := Decode(data)
	var pe *Error
	if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) || pe.Offset != int64(len(data)-1) {
		t.Fatalf("got %v, want a malformed *Error at byte %d", err, len(data)-1)
	}
	if _, err := Decode(nested(maxDepth + 1)); err != nil {
		t.Fatal(err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, name := range []string{"values.p2.pickle", "values.p5.pickle", "evil_reduce.p2.pickle"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(data)
		var doc *Doc
		var err error
		if got, bound := allocated(func() { doc, err = d.DecodeDoc() }), memoryBound(data, d.budget); got > bound {
			t.Fatalf("%d bytes allocated for %d bytes of input, more than %d", got, len(data), bound)
		}
		var v any
		if err == nil {
			v, err = doc.ToAny(doc.Root())
		}
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *pickle.Error", err)
			}
			if pe.Offset < 0 || pe.Offset > int64(len(data)) {
				t.Fatalf("offset %d outside input of %d bytes", pe.Offset, len(data))
			}
			return
		}
		_ = v
	})
}

// TestInlineInts checks ints at the edges of those a Value holds itself:
// in a list, as dict keys, through the memo, and their kinds in the Doc.
func TestInlineInts(t *testing.T) {
	binint := func(x int32) []byte {
		b := []byte{opBinInt, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(b[1:], uint32(x))
		return b
	}
	vals := []int32{0, 255, 65535, maxInline - 1, maxInline, 1<<31 - 1, -1, -1 << 31}
	p := []byte{opProto, 2, opEmptyList, opMark}
	for _, x := range vals {
		p = append(p, binint(x)...)
	}
	p = append(p, opBinInt1, 7, opBinPut, 0, opBinInt2, 0xff, 0xff, opAppends)
	// A dict keyed by an inline int, valued by the memoized one.
	p = append(p, opEmptyDict, opBinInt1, 3, opBinGet, 0, opSetItem, opAppend, opStop)
	doc, err := NewDecoder(p).DecodeDoc()
	if err != nil {
		t.Fatal(err)
	}
	items := doc.Slice(doc.Root())
	want := []int64{0, 255, 65535, maxInline - 1, maxInline, 1<<31 - 1, -1, -1 << 31, 7, 65535}
	if len(items) != len(want)+1 {
		t.Fatalf("%d items, want %d", len(items), len(want)+1)
	}
	for i, w := range want {
		if k := doc.Kind(items[i]); k != KindInt {
			t.Errorf("item %d: kind %s, want int", i, k)
		}
		if got, ok := doc.Int(items[i]); !ok || got != w {
			t.Errorf("item %d: %d (%v), want %d", i, got, ok, w)
		}
	}
	got, err := doc.ToAny(items[len(want)])
	if err != nil {
		t.Fatal(err)
	}
	d, ok := got.(*Dict)
	if !ok || d.Len() != 1 {
		t.Fatalf("last item %#v, want a dict of one pair", got)
	}
	if v, ok := d.Get("3"); !ok || v != int64(7) {
		t.Errorf(`dict["3"] = %#v, want 7`, v)
	}
}
