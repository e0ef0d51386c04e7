package pickle

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// chunkReader returns its data a few bytes at a time, sizes cycling
// through sizes (a decompressor's reads end anywhere).
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.data), r.sizes[r.i%len(r.sizes)])
	r.i++
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// withWindow runs f with the window's sizes set to win and low.
func withWindow(win, low int, f func()) {
	w, l := windowSize, windowLow
	windowSize, windowLow = win, low
	defer func() { windowSize, windowLow = w, l }()
	f()
}

// offRecorder is a parRecorder that records each entry's offset too.
type offRecorder struct {
	parRecorder
	offs []int
}

func (r *offRecorder) NewEntry(n uint32, off int) {
	r.offs = append(r.offs, off)
	r.parRecorder.NewEntry(n, off)
}

// decodeVia decodes data whole (in nil) or from in, streamed entries or
// the whole tree, and describes what it gave.
func decodeVia(data []byte, in io.Reader, size int64, stream bool) (string, *Decoder) {
	d := NewDecoder(data)
	if in != nil {
		d = NewReaderDecoder(in, size)
	}
	var r *offRecorder
	if stream {
		r = &offRecorder{parRecorder: parRecorder{recorder: recorder{doc: d.Doc(), kinds: true}}}
		d.StreamEntries("device_traces", r)
		d.Workers = 2
	}
	doc, err := d.DecodeDoc()
	var b strings.Builder
	fmt.Fprintf(&b, "err %v\n", err)
	var pe *Error
	if err == nil || errors.As(err, &pe) {
		// (Not after an error of the handler's or ErrNotStreamable,
		// which come before the decoder's state is brought up to date.)
		fmt.Fprintf(&b, "offset %d\n", d.Offset())
	}
	if r != nil {
		fmt.Fprintf(&b, "entries %q\noffs %v\n", r.entries, r.offs)
	}
	if err == nil && !stream {
		v, err := doc.ToAny(doc.Root())
		fmt.Fprintf(&b, "%s %v\n", dump(v), err)
	}
	if pe != nil {
		pdoc, stack := d.Partial()
		fmt.Fprintf(&b, "partial %d values %d strings, stack %v\n", pdoc.NumValues(), pdoc.NumStrings(), stack)
	}
	return b.String(), d
}

// dump renders a decoded value, its types and its dicts' order, to depth
// 30 (a list may hold itself).
func dump(v any) string { return dumpTo(v, 30) }

func dumpTo(v any, depth int) string {
	if depth == 0 {
		return "..."
	}
	switch x := v.(type) {
	case Tuple:
		return "(" + dumpAll([]any(x), depth-1) + ")"
	case *List:
		return "[" + dumpAll(x.Items, depth-1) + "]"
	case *Dict:
		var b strings.Builder
		for _, p := range x.Pairs {
			fmt.Fprintf(&b, "%q: %s, ", p.Key, dumpTo(p.Value, depth-1))
		}
		return "{" + b.String() + "}"
	}
	return fmt.Sprintf("%T(%#v)", v, v)
}

func dumpAll(xs []any, depth int) string {
	var b strings.Builder
	for _, x := range xs {
		b.WriteString(dumpTo(x, depth) + ", ")
	}
	return b.String()
}

// readerCorpus returns the pickles the reader's tests decode: the
// package's test files, the first 24 KiB of the real snapshots of
// realSet (1 MiB of all nine with FRAGSIM_LONG=1), and the synthetic
// snapshots of the other tests.
func readerCorpus(t *testing.T) map[string][]byte {
	out := map[string][]byte{}
	files, _ := filepath.Glob("testdata/*.pickle")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = data
	}
	n := 24 << 10
	if longTests() {
		n = 1 << 20
	}
	for _, name := range append(realSet(t), snapshotDirFiles()...) {
		out[filepath.Base(name)] = realHead(t, name, n)
	}
	out["stream"] = streamSnapshot()
	out["stacks"] = stackSnapshot(200, 7)
	for i, p := range fastEntriesSeeds() {
		out[fmt.Sprint("seed", i)] = p
	}
	// A long string and a long text line, past any window.
	long := pk{opProto, 4, opMark}
	long = append(long, opBinUnicode, 0, 0, 3, 0)
	long = append(long, bytes.Repeat([]byte("s"), 3<<16)...)
	long = append(long, opLong)
	long = append(long, bytes.Repeat([]byte("1"), 18)...)
	long = append(long, 'L', '\n', opString, '\'')
	long = append(long, bytes.Repeat([]byte("t"), 5000)...)
	long = append(long, '\'', '\n', opTuple, opStop)
	out["long"] = long
	return out
}

// TestReaderMatchesWhole decodes every pickle of the corpus, and cuts of
// it, from a reader through windows small enough to end inside every
// opcode (each cut through one of them in turn, through each with
// FRAGSIM_LONG=1) and through the default one, the tree and the streamed entries,
// and checks that it gives what the decode of the whole input gives: the
// same values, entries, entry offsets, errors and offsets, and Partial.
func TestReaderMatchesWhole(t *testing.T) {
	windows := [][2]int{{16, 4}, {61, 23}, {1000, 300}, {windowSize, windowLow}}
	for name, data := range readerCorpus(t) {
		cuts := []int{len(data)}
		for c := 1; c < len(data) && c < 4000; c += 1 + c/3 {
			cuts = append(cuts, c)
		}
		for i, cut := range cuts {
			in := data[:cut]
			for _, stream := range []bool{false, true} {
				want, _ := decodeVia(in, nil, 0, stream)
				for j, w := range windows {
					for _, size := range []int64{-1, int64(len(in)), 3} {
						if cut != len(data) && (w[0] > 1000 || size != -1) {
							continue
						}
						// The everyday pass reads each cut through one of
						// the small windows, in turn; the long pass
						// (FRAGSIM_LONG=1) through each.
						if cut != len(data) && !longTests() && j != i%3 {
							continue
						}
						var got string
						withWindow(w[0], w[1], func() {
							got, _ = decodeVia(nil, &chunkReader{data: in, sizes: []int{1, 7, 4096, 3}}, size, stream)
						})
						if got != want {
							t.Fatalf("%s cut at %d, stream %v, window %v, size %d:\n got %.600s\nwant %.600s", name, cut, stream, w, size, got, want)
						}
					}
				}
			}
		}
	}
}

// failReader gives its data, then fails.
type failReader struct {
	data []byte
	err  error
}

func (r *failReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestReaderErrors checks the errors of a reader that ends early or
// fails: ErrTruncated at the offset where the input stops, naming the
// reader's error, and the Partial the whole input's cut there gives.
func TestReaderErrors(t *testing.T) {
	data := []byte(streamSnapshot())
	boom := errors.New("gzip: invalid checksum")
	for _, cut := range []int{0, 1, 5, len(data) / 2, len(data) - 1} {
		for _, rerr := range []error{io.EOF, io.ErrUnexpectedEOF, boom} {
			d := NewReaderDecoder(&failReader{data: data[:cut], err: rerr}, -1)
			_, err := d.DecodeDoc()
			var pe *Error
			if !errors.As(err, &pe) || !errors.Is(err, ErrTruncated) || pe.Offset > int64(cut) {
				t.Fatalf("cut at %d, %v: err = %v, want ErrTruncated at or before %d", cut, rerr, err, cut)
			}
			if !strings.Contains(err.Error(), fmt.Sprint("byte ", cut)) && !strings.Contains(err.Error(), fmt.Sprint("offset ", cut)) {
				t.Errorf("cut at %d, %v: %v does not name the offset", cut, rerr, err)
			}
			if named := strings.Contains(err.Error(), rerr.Error()); named != (rerr != io.EOF) {
				t.Errorf("cut at %d, %v: %v", cut, rerr, err)
			}
			wd := NewDecoder(data[:cut])
			_, werr := wd.DecodeDoc()
			var wpe *Error
			if !errors.As(werr, &wpe) || wpe.Offset != pe.Offset || wpe.Op != pe.Op {
				t.Errorf("cut at %d, %v: %v, the whole input's %v", cut, rerr, err, werr)
			}
		}
	}
}

// TestReaderBounded decodes a snapshot of 180 KB, gzip'd, through a
// window of 16 KiB, and checks that the decoder never held more than
// its window of input, and that a string longer than the window grows
// the window only for as long as it is read.
func TestReaderBounded(t *testing.T) {
	withWindow(16<<10, 1<<10, func() { testReaderBounded(t) })
}

func testReaderBounded(t *testing.T) {
	data := []byte(stackSnapshot(3750, 5))
	if len(data) < 8*windowSize {
		t.Fatalf("the snapshot is %d bytes, not much more than the window", len(data))
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	zw.Close()
	for _, stream := range []bool{false, true} {
		zr, err := gzip.NewReader(bytes.NewReader(gz.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := decodeVia(data, nil, 0, stream)
		got, d := decodeVia(nil, zr, -1, stream)
		if got != want {
			t.Fatalf("stream %v: got %.300s, want %.300s", stream, got, want)
		}
		if p := d.BufferedPeak(); p != windowSize {
			t.Errorf("stream %v: %d bytes of input buffered at most, want the window's %d", stream, p, windowSize)
		}
	}
	// A string of three windows, then two windows of ints.
	s := 3 * windowSize
	p := pk{opProto, 4, opMark}
	p = append(p, opBinUnicode, byte(s), byte(s>>8), byte(s>>16), byte(s>>24))
	p = append(p, bytes.Repeat([]byte("x"), s)...)
	for range 2 * windowSize / 4 {
		p = append(p, opBinInt1, 7, opPop)
	}
	p = append(p, opTuple, opStop)
	d := NewReaderDecoder(bytes.NewReader(p), -1)
	doc, err := d.DecodeDoc()
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := doc.ToAny(doc.Root()); len(v.(Tuple)) != 1 || len(v.(Tuple)[0].(string)) != s {
		t.Fatalf("decoded %.100v", v)
	}
	if peak := d.BufferedPeak(); peak < s || peak > 2*(s+windowSize)+windowSize {
		t.Errorf("%d bytes buffered at most for a string of %d", peak, s)
	}
	if c := cap(d.data); c != windowSize {
		t.Errorf("the window holds %d bytes after the string, want %d", c, windowSize)
	}
}

// TestReaderBudget checks that a reader's budget counts the bytes decoded
// so far: a bomb is stopped within a budget's check of where the whole
// input's budget would stop it at that size, and a snapshot decodes.
func TestReaderBudget(t *testing.T) {
	// The 40 MiB of input are made as the decoder reads them: held in
	// memory, they would cost more than the decode under the race detector.
	n := 40 << 20
	in := io.MultiReader(bytes.NewReader([]byte{opProto, 4}), &repeatReader{b: opEmptyList, n: n}, bytes.NewReader([]byte{opStop}))
	var err error
	got := allocated(func() { _, err = NewReaderDecoder(in, -1).DecodeDoc() })
	var pe *Error
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "past the budget") {
		t.Fatalf("err = %v, want the budget's error", err)
	}
	// EMPTY_LIST costs 13 bytes a byte (a value and a stack entry):
	// past the floor plus 3 bytes a byte at about 3.2 MiB of input.
	if lim := int64(budgetFloor/10 + 2*budgetEvery); pe.Offset > lim {
		t.Errorf("stopped at byte %d, past %d", pe.Offset, lim)
	}
	if bound := memoryBound(nil, budgetFloor+budgetRatio*pe.Offset) + 2*uint64(pe.Offset) + uint64(windowSize); got > bound {
		t.Errorf("%d bytes allocated, more than %d", got, bound)
	}
	if !reflect.DeepEqual(pe.Err, ErrMalformed) {
		t.Errorf("class %v", pe.Err)
	}
}

// repeatReader reads as n bytes b.
type repeatReader struct {
	b byte
	n int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), r.n)]
	// One store, then copies that double: a loop of byte stores would be
	// most of TestReaderBudget's time under the race detector.
	p[0] = r.b
	for i := 1; i < len(p); i *= 2 {
		copy(p[i:], p[:i])
	}
	r.n -= len(p)
	return len(p), nil
}

// FuzzReader checks that decoding from a reader, through a window small
// enough to end inside most opcodes, gives what decoding the whole input
// gives: the same values or entries, errors and offsets.
func FuzzReader(f *testing.F) {
	for _, name := range []string{"values.p0.pickle", "values.p5.pickle", "evil_reduce.p2.pickle"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint8(5))
	}
	f.Add([]byte(streamSnapshot()), uint8(9))
	f.Fuzz(func(t *testing.T, data []byte, w uint8) {
		win := 8 + int(w)
		for _, stream := range []bool{false, true} {
			want, _ := decodeVia(data, nil, 0, stream)
			var got string
			withWindow(win, win/3, func() {
				got, _ = decodeVia(nil, &chunkReader{data: data, sizes: []int{1 + int(w)%5, 3}}, -1, stream)
			})
			if got != want {
				t.Fatalf("window %d, stream %v:\n got %.600s\nwant %.600s", win, stream, got, want)
			}
		}
	})
}
