package pickle

import (
	"bytes"
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
	e.Int(1)
	e.Int(2)
	e.Tuple2()
	e.BeginDict()
	e.EndDict()
	e.EndList()
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
	misc, _ := d.Get("misc")
	items := misc.(*List).Items
	if items[0] != 2.5 || items[1] != true || items[2] != false || items[3] != nil ||
		!reflect.DeepEqual(items[4], Tuple{int64(1), int64(2)}) || items[5].(*Dict).Len() != 0 {
		t.Fatalf("misc: got %#v", items)
	}
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
print("ok")`)
	cmd.Stdin = bytes.NewReader(encodeSample(t))
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("python: %v\n%s", err, out)
	}
}
