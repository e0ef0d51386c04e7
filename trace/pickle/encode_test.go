package pickle

import (
	"bytes"
	"fmt"
	"math"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

func encodeSample(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := NewEncoder(&buf)
	e.BeginDict()
	e.Str("ints")
	e.BeginList()
	for _, v := range []int64{0, 255, 256, 65535, 65536, -1, math.MaxInt32, math.MinInt32, 1 << 40, -(1 << 40), math.MaxInt64, math.MinInt64} {
		e.Int(v)
	}
	e.Uint(1<<64 - 1)
	e.EndList()
	e.Str("str")
	e.Str(strings.Repeat("é", 200))
	e.Str("misc")
	e.BeginList()
	e.Float(2.5)
	e.Bool(true)
	e.Bool(false)
	e.None()
	e.IntPair(1, 2)
	e.BeginDict()
	e.EndDict()
	e.EndList()
	// Containers past a batch: a list of 2,500 items, a dict of 2,500
	// pairs, the items of the last batch a pair each.
	e.Str("long")
	e.BeginList()
	for i := 0; i < 2500; i++ {
		e.IntPair(int64(i), 0)
	}
	e.EndList()
	e.Str("wide")
	e.BeginDict()
	for i := 0; i < 2500; i++ {
		e.Str(fmt.Sprint(i))
		e.Int(int64(i))
	}
	e.EndDict()
	e.EndDict()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestEncoderRoundTrip(t *testing.T) {
	v, err := Decode(encodeSample(t))
	if err != nil {
		t.Fatal(err)
	}
	d := v.(*Dict)
	ints, _ := d.Get("ints")
	var got []any
	got = append(got, ints.(*List).Items...)
	want := []any{int64(0), int64(255), int64(256), int64(65535), int64(65536), int64(-1), int64(math.MaxInt32),
		int64(math.MinInt32), int64(1 << 40), int64(-(1 << 40)), int64(math.MaxInt64), int64(math.MinInt64), uint64(1<<64 - 1)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ints: got %v, want %v", got, want)
	}
	if s, _ := d.Get("str"); s != strings.Repeat("é", 200) {
		t.Fatalf("str: got %q", s)
	}
	long, _ := d.Get("long")
	if items := long.(*List).Items; len(items) != 2500 || !reflect.DeepEqual(items[2499], Tuple{int64(2499), int64(0)}) {
		t.Fatalf("long: %d items, last %v", len(items), items[len(items)-1])
	}
	wide, _ := d.Get("wide")
	if w := wide.(*Dict); w.Len() != 2500 {
		t.Fatalf("wide: %d pairs", w.Len())
	} else if v, _ := w.Get("1999"); v != int64(1999) {
		t.Fatalf("wide[1999] = %v", v)
	}
	// No batch holds more than 1000 items.
	if n := maxBatch(encodeSample(t)); n > 1000 {
		t.Fatalf("a batch of %d items", n)
	}
	misc, _ := d.Get("misc")
	items := misc.(*List).Items
	if items[0] != 2.5 || items[1] != true || items[2] != false || items[3] != nil ||
		!reflect.DeepEqual(items[4], Tuple{int64(1), int64(2)}) || items[5].(*Dict).Len() != 0 {
		t.Fatalf("misc: got %#v", items)
	}
}

// maxBatch returns the most items added to a container by one APPENDS or
// SETITEMS, counted with pickletools' view of the stack depth.
func maxBatch(data []byte) int {
	py, err := exec.LookPath("python3")
	if err != nil {
		return 0
	}
	cmd := exec.Command(py, "-c", `import pickletools, sys
data = sys.stdin.buffer.read()
marks, depth, most = [], 0, 0
for op, arg, pos in pickletools.genops(data):
    if op.name == "MARK":
        marks.append(depth)
    elif op.name in ("APPENDS", "SETITEMS"):
        n = depth - marks.pop()
        most = max(most, n if op.name == "APPENDS" else n // 2)
        depth -= n
        continue
    depth += len(op.stack_after) - len(op.stack_before) if op.name != "MARK" else 0
print(most)`)
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		return 0
	}
	var n int
	fmt.Sscan(string(out), &n)
	return n
}

// TestEncoderPython loads the pickle with Python's own pickle module.
func TestEncoderPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	cmd := exec.Command(py, "-c", `import pickle,sys
d = pickle.load(sys.stdin.buffer)
assert d["ints"] == [0,255,256,65535,65536,-1,2**31-1,-2**31,2**40,-2**40,2**63-1,-2**63,2**64-1], d["ints"]
assert d["str"] == "é"*200
assert d["misc"] == [2.5, True, False, None, (1, 2), {}], d["misc"]
assert d["long"] == [(i, 0) for i in range(2500)]
assert d["wide"] == {str(i): i for i in range(2500)}
print("ok")`)
	cmd.Stdin = bytes.NewReader(encodeSample(t))
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("python: %v\n%s", err, out)
	}
}

// A fragment embedded in a pickle reads as if written in place, batches
// included: 1,500 fragments in a list (more than a batch of 1,000), three
// in a hundred of them of 1,200 items (more than a batch too), the others
// of 7.
func TestEncoderEmbed(t *testing.T) {
	size := func(i int) int {
		if i%100 == 0 || i%100 == 99 || i%100 == 50 {
			return 1200
		}
		return 7
	}
	var out bytes.Buffer
	e := NewEncoder(&out)
	e.BeginList()
	for i := range 1500 {
		var frag bytes.Buffer
		f := NewFragment(&frag)
		f.BeginList()
		for j := range size(i) {
			f.Int(int64(i*10000 + j))
		}
		f.EndList()
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := e.Embed(&frag); err != nil {
			t.Fatal(err)
		}
	}
	e.EndList()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	v, err := Decode(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	outer := v.(*List).Items
	if len(outer) != 1500 {
		t.Fatalf("%d lists", len(outer))
	}
	for i := range outer {
		inner, n := outer[i].(*List).Items, size(i)
		if len(inner) != n || inner[0] != int64(i*10000) || inner[n-1] != int64(i*10000+n-1) {
			t.Fatalf("list %d: %d items, want %d", i, len(inner), n)
		}
	}
	if n := maxBatch(out.Bytes()); n > 1000 {
		t.Fatalf("a batch of %d items", n)
	}
}
