package pytorch

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
	"github.com/fragsim/fragsim/trace/pytorch/snapgen"
)

// loadPickle converts the pickle data, its trace entries streamed to the
// converter when stream is set (see LoadPickle).
func loadPickle(data []byte, opt Options, stream bool, release func(int)) (*Snapshot, error) {
	return loadPickleIn(input{data: data}, opt, stream, release)
}

// traceBytes returns the trace s writes, with the options ImportFile uses.
func traceBytes(t *testing.T, s *Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, s.Header(), s.WriterOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Emit(w, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// events returns the events s writes, before their stacks and texts.
func events(t *testing.T, s *Snapshot) []event {
	t.Helper()
	w := &eventWriter{s: s, collect: true}
	if err := s.each(w); err != nil {
		t.Fatal(err)
	}
	return w.out
}

// written returns what s gives a trace writer, uncompressed (recorded),
// and its summary as JSON: for comparing two imports with each other.
// Two imports with the same record and summary write the same trace byte
// for byte (the writer's output is a function of its header, its options,
// which follow from the summary's events, and the calls it is given), and
// the record spares each call a zstd encoder (1.25 MiB of tables, most of
// a small import's time under the race detector). A test that compares
// with what ImportFile writes uses traceBytes.
func written(t *testing.T, s *Snapshot) ([]byte, string) {
	t.Helper()
	data := recorded(t, s)
	sum, err := json.Marshal(s.Summary())
	if err != nil {
		t.Fatal(err)
	}
	return data, string(sum)
}

// recorded returns s's header as JSON and every call s.Emit makes on its
// sink, in order, as bytes (see recorder).
func recorded(t *testing.T, s *Snapshot) []byte {
	t.Helper()
	h, err := json.Marshal(s.Header())
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{strs: map[string]trace.StringID{}, stks: map[string]trace.StackID{}}
	r.buf = append(append(r.buf, h...), '\n')
	if err := s.Emit(r, nil); err != nil {
		t.Fatal(err)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.buf
}

// recorder is a trace.RangeSink that records what it is given, as
// trace.Writer would take it: a string or stack when first defined (with
// the ID a Writer gives it: in order of definition, from 1), each event's
// fields, and the end of a chunk (Flush, WriteRangeEnd) where the chunk
// holds something, as the Writer writes a chunk only then. Like the
// Writer, it refuses an event or frame whose string or stack is not
// defined (recorded's test fails).
type recorder struct {
	buf     []byte
	strs    map[string]trace.StringID
	stks    map[string]trace.StackID
	pending bool  // something recorded since the last chunk end
	err     error // the first undefined string or stack used, which a Writer refuses
	scratch []trace.Event
}

var _ trace.RangeSink = (*recorder)(nil)

func (r *recorder) String(s string) trace.StringID {
	if s == "" {
		return trace.NoString
	}
	if id, ok := r.strs[s]; ok {
		return id
	}
	id := trace.StringID(len(r.strs) + 1)
	r.strs[s] = id
	r.buf = binary.AppendUvarint(append(r.buf, 's'), uint64(len(s)))
	r.buf = append(r.buf, s...)
	r.pending = true
	return id
}

func (r *recorder) Stack(frames []trace.Frame) trace.StackID {
	if len(frames) == 0 {
		return trace.NoStack
	}
	var key []byte
	for _, f := range frames {
		if int(f.Func) > len(r.strs) || int(f.File) > len(r.strs) {
			r.err = fmt.Errorf("stack frame uses undefined string %d or %d", f.Func, f.File)
		}
		key = binary.AppendUvarint(key, uint64(f.Func))
		key = binary.AppendUvarint(key, uint64(f.File))
		key = binary.AppendUvarint(key, uint64(f.Line))
	}
	if id, ok := r.stks[string(key)]; ok {
		return id
	}
	id := trace.StackID(len(r.stks) + 1)
	r.stks[string(key)] = id
	r.buf = binary.AppendUvarint(append(r.buf, 'k'), uint64(len(frames)))
	r.buf = append(r.buf, key...)
	r.pending = true
	return id
}

func (r *recorder) WriteEvent(e trace.Event) error {
	if int(e.Text) > len(r.strs) || int(e.Stack) > len(r.stks) {
		r.err = fmt.Errorf("event uses undefined string %d or stack %d", e.Text, e.Stack)
	}
	r.buf = append(r.buf, 'e', byte(e.Kind), byte(e.Marker))
	for _, v := range []uint64{uint64(e.Device), uint64(e.Stream), uint64(e.TimeNS), e.Addr, e.SizeBytes, e.Aux, uint64(e.Text), uint64(e.Stack)} {
		r.buf = binary.AppendUvarint(r.buf, v)
	}
	r.pending = true
	return nil
}

func (r *recorder) WriteEvents(evs []trace.Event) error {
	for _, e := range evs {
		r.WriteEvent(e)
	}
	return nil
}

func (r *recorder) WriteRange(n int, fill func(dst []trace.Event, i int)) error {
	if r.scratch == nil {
		r.scratch = make([]trace.Event, 1000)
	}
	for i := 0; i < n; i += len(r.scratch) {
		dst := r.scratch[:min(len(r.scratch), n-i)]
		fill(dst, i)
		r.WriteEvents(dst)
	}
	return nil
}

func (r *recorder) WriteRangeEnd(n int, fill func(dst []trace.Event, i int)) error {
	r.WriteRange(n, fill)
	return r.Flush()
}

func (r *recorder) Flush() error {
	if r.pending {
		r.buf = append(r.buf, '|')
		r.pending = false
	}
	return nil
}

// sameAsWhole checks that data imports to the same trace and summary
// streamed (when streamed is true, the streaming path must take it) and
// decoded as a whole, and returns both imports.
func sameAsWhole(t *testing.T, name string, data []byte, opt Options, streamed bool) (*Snapshot, *Snapshot) {
	t.Helper()
	whole, err := loadPickle(data, opt, false, nil)
	if err != nil {
		t.Fatalf("%s: whole: %v", name, err)
	}
	st, err := loadPickle(data, opt, true, nil)
	if st != nil {
		st.Close()
	}
	if streamed && err != nil {
		t.Fatalf("%s: not streamed: %v", name, err)
	}
	if !streamed && err == nil {
		t.Fatalf("%s: streamed, want it decoded again as a whole", name)
	}
	s, err := LoadPickle(data, opt)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	gotTrace, gotSum := written(t, s)
	wantTrace, wantSum := written(t, whole)
	if !bytes.Equal(gotTrace, wantTrace) {
		t.Errorf("%s: the traces differ (%d and %d bytes)", name, len(gotTrace), len(wantTrace))
	}
	if gotSum != wantSum {
		t.Errorf("%s: summary\n%s\nwant\n%s", name, gotSum, wantSum)
	}
	return s, whole
}

// TestStreamedMatchesWhole imports every test snapshot, hand-made and
// real, streamed (LoadPickle's import, made once for the package's tests:
// reference) and as a whole: the traces are byte for byte the same, and
// the streamed decode keeps no value per entry.
func TestStreamedMatchesWhole(t *testing.T) {
	for name, data := range testSnapshots(t) {
		ref := imported(t, name)
		if ref.streamErr != nil {
			t.Fatalf("%s: not streamed: %v", name, ref.streamErr)
		}
		whole, err := loadPickle(data, Options{}, false, nil)
		if err != nil {
			t.Fatalf("%s: whole: %v", name, err)
		}
		wantTrace, wantSum := written(t, whole)
		if !bytes.Equal(ref.trace, wantTrace) {
			t.Errorf("%s: the traces differ (%d and %d bytes)", name, len(ref.trace), len(wantTrace))
		}
		if ref.sum != wantSum {
			t.Errorf("%s: summary\n%s\nwant\n%s", name, ref.sum, wantSum)
		}
		// Decoded whole, each entry is at least a dict in the value table.
		if whole.doc.NumValues()-ref.values < ref.entries {
			t.Errorf("%s: %d values kept for %d entries, %d decoded whole", name, ref.values, ref.entries, whole.doc.NumValues())
		}
		whole.Close()
	}
}

// TestParallelMatchesSequential imports every test snapshot with its
// entries decoded on workers, in small chunks from the ninth entry on, its
// initial state rebuilt and its events converted on goroutines, and all on
// one goroutine: the traces and summaries are byte for byte the same, and
// the workers took part in the real snapshots. (How many entries they
// decode depends on timing: see TestParallelReal in trace/pickle.)
func TestParallelMatchesSequential(t *testing.T) {
	// The initial state and the conversion on goroutines too, from 64
	// events of a device on.
	defer func(n, m, c int) { parallelMin, partMin, mergeCopyMin = n, m, c }(parallelMin, partMin, mergeCopyMin)
	parallelMin, partMin, mergeCopyMin = 64, 16, 1 // Merge's copies on other goroutines too
	for name, data := range testSnapshots(t) {
		seq, err := loadPickle(data, Options{Workers: 1}, true, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		par, err := loadPickle(data, Options{Workers: 4, tune: &pickle.ParallelTuning{After: 8, ChunkBytes: 3000}}, true, nil)
		if err != nil {
			t.Fatalf("%s: on workers: %v", name, err)
		}
		gotTrace, gotSum := written(t, par)
		wantTrace, wantSum := written(t, seq)
		if !bytes.Equal(gotTrace, wantTrace) || gotSum != wantSum {
			t.Errorf("%s: on workers, the trace (%d bytes, %d alone) or summary differ:\n%s\n%s", name, len(gotTrace), len(wantTrace), gotSum, wantSum)
		}
		if seq.par.Workers != 0 {
			t.Errorf("%s: %d workers started with Workers 1", name, seq.par.Workers)
		}
		if strings.Contains(name, "real/") && (par.par.Chunks < 2 || par.par.Entries == 0) {
			t.Errorf("%s: the workers decoded %d of %d entries (%+v)", name, par.par.Entries, par.summary.Events, par.par)
		}
	}
}

// TestForkMemoryLate imports the real snapshots on workers with the
// events' memory Fork makes for the rest of the input held back: the
// decoder goes on without it (the log grows as it did before), and the
// traces are LoadPickle's (reference), which TestParallelMatchesSequential
// holds to those of a decode on one goroutine.
func TestForkMemoryLate(t *testing.T) {
	snaps := testSnapshots(t)
	want := map[string]*reference{}
	for name := range snaps {
		if strings.Contains(name, "real/") {
			want[name] = imported(t, name) // before Fork's memory is held
		}
	}
	forkHold = make(chan struct{})
	defer func() { close(forkHold); forkHold = nil }()
	for name, ref := range want {
		data := snaps[name]
		done := make(chan *Snapshot)
		go func() {
			par, err := loadPickle(data, Options{Workers: 4, tune: &pickle.ParallelTuning{After: 8, ChunkBytes: 3000}}, true, nil)
			if err != nil {
				t.Errorf("%s: on workers: %v", name, err)
			}
			done <- par
		}()
		var par *Snapshot
		select {
		case par = <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%s: the decode waited for Fork's memory", name)
		}
		if par == nil {
			continue
		}
		gotTrace, gotSum := written(t, par)
		if !bytes.Equal(gotTrace, ref.trace) || gotSum != ref.sum || par.par.Chunks < 2 {
			t.Errorf("%s: Fork's memory held, the trace (%d bytes, %d alone) or summary differ, or the workers took %d chunks", name, len(gotTrace), len(ref.trace), par.par.Chunks)
		}
	}
}

// TestParallelStacks imports snapshots with call stacks on every entry,
// as PyTorch writes them (snapgen: frame dicts memoized once and fetched
// by later entries, a free_completed sharing its free_requested's frames
// list), on workers and on one goroutine: the traces and summaries
// are byte for byte the same, and the workers decoded most entries,
// frames lists and all, a free_completed whose list another chunk made
// included (few entries decoded again). The real snapshot with stacks is
// compared too, in small chunks.
func TestParallelStacks(t *testing.T) {
	var buf bytes.Buffer
	n := int64(15_000)
	if longTests() {
		n = 40_000
	}
	if err := snapgen.Write(&buf, n, 7, 8); err != nil {
		t.Fatal(err)
	}
	real := gunzip(t, "testdata/real/stacks.pickle.gz")
	for _, tc := range []struct {
		name string
		data []byte
		tune *pickle.ParallelTuning
	}{
		{"snapgen", buf.Bytes(), nil},
		{"snapgen, small chunks", buf.Bytes(), &pickle.ParallelTuning{After: 1024, ChunkBytes: 20 << 10}},
		{"real", real, &pickle.ParallelTuning{After: 8, ChunkBytes: 2000}},
	} {
		seq, err := loadPickle(tc.data, Options{Workers: 1}, true, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		par, err := loadPickle(tc.data, Options{Workers: 4, tune: tc.tune}, true, nil)
		if err != nil {
			t.Fatalf("%s: on workers: %v", tc.name, err)
		}
		gotTrace, gotSum := written(t, par)
		wantTrace, wantSum := written(t, seq)
		if !bytes.Equal(gotTrace, wantTrace) || gotSum != wantSum {
			t.Errorf("%s: on workers, the trace (%d bytes, %d alone) or summary differ:\n%s\n%s", tc.name, len(gotTrace), len(wantTrace), gotSum, wantSum)
		}
		if n := int64(par.summary.Events); par.par.Entries < n/2 || par.par.Lists == 0 || par.par.Refs == 0 || par.par.Redone > n/20 {
			t.Errorf("%s: the workers decoded %d of %d entries (%+v)", tc.name, par.par.Entries, n, par.par)
		}
		if len(par.stacks.stacks) < 2 || len(par.stacks.stacks) != len(seq.stacks.stacks) {
			t.Errorf("%s: %d stacks, %d on one goroutine", tc.name, len(par.stacks.stacks), len(seq.stacks.stacks))
		}
	}
}

// TestParallelListOtherKey imports a snapshot whose entries have a frames
// list of frame dicts but every 30th, whose list of the same dicts is
// under another key, which the import does not take as a stack, fetched
// again as frames 40 entries later, with a new stack between: on workers
// in small chunks the trace is byte for byte the one-goroutine import's
// (the workers leave those entries to the decoder; had they taken the
// list, its stack would come before the new one), and they decode most
// entries.
func TestParallelListOtherKey(t *testing.T) {
	// Memo: 0 root, 1 "device_traces", 2 outer list, 3 device list, then
	// each entry's dict and lists (the frame dicts in the first entry's).
	p := []byte{0x80, 4, '}', 0x94, '('}
	p = appendStr(p, "device_traces")
	p = append(p, 0x94, ']', 0x94, ']', 0x94, '(')
	memo := 4
	get := func(p []byte, i int) []byte { return append(p, 'j', byte(i), byte(i>>8), byte(i>>16), byte(i>>24)) }
	keys := map[string]int{} // strings memoized, fetched again (entries start so for the workers)
	str := func(p []byte, s string) []byte {
		if i, ok := keys[s]; ok {
			return get(p, i)
		}
		keys[s] = memo
		memo++
		return append(appendStr(p, s), 0x94)
	}
	frames := []int{}
	others := map[int]int{} // entry -> memo index of its other list
	for n := range 600 {
		if n > 0 && n%100 == 0 {
			p = append(p, 'e', '(')
		}
		p = append(p, '}', 0x94, '(')
		memo++
		action := []string{"alloc", "free_requested", "free_completed"}[n%3]
		p = str(p, "action")
		p = str(p, action)
		p = str(p, "addr")
		p = append(p, 'J', byte(n), byte(n>>8), 0, 1)
		if n%30 != 29 {
			p = str(p, "frames")
		}
		switch {
		case n%30 == 29: // its only list under another key
		case n == 0:
			p = append(p, ']', 0x94, '(')
			memo++
			for f := range 3 {
				p = append(p, '}', 0x94, '(')
				frames = append(frames, memo)
				memo++
				p = str(p, "name")
				p = str(p, fmt.Sprintf("fn%d", f))
				p = str(p, "filename")
				p = str(p, "a.py")
				p = str(p, "line")
				p = append(p, 'K', byte(f+1), 'u')
			}
			p = append(p, 'e')
		case others[n-40] != 0:
			p = get(p, others[n-40]) // the other list, as frames
		case n == 45:
			// A stack new to the trace between entry 29's other list and
			// its fetch as frames: its id comes first.
			p = append(p, ']', 0x94, '(')
			memo++
			p = get(get(get(p, frames[2]), frames[2]), frames[2])
			p = append(p, 'e')
		default:
			p = append(p, ']', 0x94, '(')
			memo++
			p = get(p, frames[n%3])
			p = get(p, frames[(n+1)%3])
			p = append(p, 'e')
		}
		if n%30 == 29 {
			p = str(p, "other")
			p = append(p, ']', 0x94, '(')
			others[n] = memo
			memo++
			p = get(p, frames[n%2])
			p = append(p, 'e')
		}
		p = append(p, 'u')
	}
	p = append(p, 'e', 'a', 'u', '.')
	seq, err := loadPickle(p, Options{Workers: 1}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	par, err := loadPickle(p, Options{Workers: 4, tune: &pickle.ParallelTuning{After: 8, ChunkBytes: 1000}}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	gotTrace, gotSum := written(t, par)
	wantTrace, wantSum := written(t, seq)
	if !bytes.Equal(gotTrace, wantTrace) || gotSum != wantSum {
		t.Errorf("on workers, the trace (%d bytes, %d alone) or summary differ:\n%s\n%s", len(gotTrace), len(wantTrace), gotSum, wantSum)
	}
	// (The trace numbers the stacks as its events first use them: the
	// table's order shows apart from it.)
	if !reflect.DeepEqual(par.stacks.stacks, seq.stacks.stacks) {
		t.Errorf("the stack table differs on workers: %d stacks, %d alone", len(par.stacks.stacks), len(seq.stacks.stacks))
	}
	if par.par.Entries < 400 {
		t.Errorf("the workers decoded %d of 600 entries (%+v)", par.par.Entries, par.par)
	}
}

// snapshotPickle returns a protocol 4 pickle of a snapshot with the trace
// entries given as raw pickle bytes (each pushes one value) and the
// external annotations as raw bytes too (pushing one list). The memo holds
// 0: root, 1: "device_traces", 2: the outer list, 3: the device list.
func snapshotPickle(entries [][]byte, annotations []byte) []byte {
	n := 64 + len(annotations)
	for _, e := range entries {
		n += len(e)
	}
	p := append(make([]byte, 0, n), 0x80, 4, '}', 0x94, '(')
	p = appendStr(p, "device_traces")
	p = append(p, 0x94, ']', 0x94, ']', 0x94, '(')
	for _, e := range entries {
		p = append(p, e...)
	}
	p = append(p, 'e', 'a')
	if annotations != nil {
		p = appendStr(p, "external_annotations")
		p = append(p, annotations...)
	}
	return append(p, 'u', '.')
}

func appendStr(p []byte, s string) []byte { return append(append(p, 0x8c, byte(len(s))), s...) }

// entryPickle returns an entry dict (memoized) with the given string and
// small-int pairs, in order.
func entryPickle(pairs ...any) []byte {
	p := []byte{'}', 0x94, '('}
	for _, x := range pairs {
		switch v := x.(type) {
		case string:
			p = appendStr(p, v)
		case int:
			p = append(p, 'M', byte(v), byte(v>>8))
		}
	}
	return append(p, 'u')
}

// TestStreamFallback checks snapshots the streaming path cannot follow:
// they are decoded again as a whole, and give that decode's trace.
func TestStreamFallback(t *testing.T) {
	alloc := entryPickle("action", "alloc", "addr", 4096, "size", 512, "time_us", 1)
	free := entryPickle("action", "free_requested", "addr", 4096, "size", 512, "time_us", 2)
	// Memo: 4 is the first entry.
	cases := map[string][]byte{
		// The same entry dict twice in the trace (pickled once, then got).
		"shared entry": snapshotPickle([][]byte{alloc, {'h', 4}, free}, nil),
		// An entry dict also used as an annotation.
		"entry elsewhere": snapshotPickle([][]byte{alloc, free}, []byte{']', 'h', 4, 'a'}),
		// A key set twice (Python keeps the last value).
		"key twice": snapshotPickle([][]byte{entryPickle("action", "alloc", "addr", 4096, "action", "free_requested", "time_us", 1)}, nil),
		// device_free before the action (an OOM keeps it in Addr).
		"oom's free first": snapshotPickle([][]byte{entryPickle("device_free", 77, "action", "oom", "size", 512, "time_us", 1)}, nil),
	}
	for name, data := range cases {
		sameAsWhole(t, name, data, Options{}, false)
	}
	// An OOM with its action first is streamed, its address dropped and
	// device_free kept, in either order.
	for _, e := range [][]byte{
		entryPickle("action", "oom", "addr", 4096, "device_free", 77, "size", 512, "time_us", 1),
		entryPickle("addr", 4096, "action", "oom", "device_free", 77, "size", 512, "time_us", 1),
		entryPickle("action", "oom", "device_free", 77, "addr", 4096, "size", 512, "time_us", 1),
	} {
		s, _ := sameAsWhole(t, "oom", snapshotPickle([][]byte{e}, nil), Options{}, true)
		evs := events(t, s)
		if ev := evs[0].Event(); len(evs) != 1 || ev.Kind != trace.KindOOM || ev.Addr != 0 || ev.Aux != 77 {
			t.Errorf("oom event %+v", ev)
		}
	}
	if n := unsafe.Sizeof(event{}); n != 48 {
		t.Errorf("an event takes %d bytes, want 48", n)
	}
	// A key added to an entry after its list took it is followed.
	late := append(append([]byte{}, alloc...), 'h', 4)
	late = appendStr(late, "stream")
	late = append(late, 'K', 7, 's', '0')
	s, _ := sameAsWhole(t, "changed later", snapshotPickle([][]byte{late, free}, nil), Options{}, true)
	if evs := events(t, s); len(evs) != 2 || evs[0].Stream != 7 {
		t.Errorf("events %+v, want the first on stream 7", evs)
	}
}

// TestStreamRefusesCode checks that a refused opcode inside a trace entry
// fails the import with the decoder's error, with or without streaming.
func TestStreamRefusesCode(t *testing.T) {
	e := entryPickle("action", "alloc")
	e = append(e[:len(e)-1], 'c')
	e = append(e, "os\nsystem\n"...)
	data := snapshotPickle([][]byte{e}, nil)
	s, err := LoadPickle(data, Options{})
	var pe *pickle.Error
	if s != nil || !errors.Is(err, pickle.ErrUnsafe) || !errors.As(err, &pe) || pe.Op != 'c' || int(pe.Offset) != bytes.Index(data, []byte("os\n"))-1 {
		t.Fatalf("err %v, want GLOBAL refused at its offset", err)
	}
}

// TestImportFileReleasesInput imports a mapped snapshot larger than the
// decoder's release step: the pages it gives back while decoding are read
// again from the file if needed, and the trace is the one of the bytes.
func TestImportFileReleasesInput(t *testing.T) {
	var entries [][]byte
	for i := range 400_000 {
		act := "alloc"
		if i%2 == 1 {
			act = "free_requested"
		}
		entries = append(entries, entryPickle("action", act, "addr", 512*(i/2), "size", 512, "time_us", i))
	}
	data := snapshotPickle(entries, nil)
	if len(data) < 20<<20 {
		t.Fatalf("snapshot of %d bytes, want more than 20 MiB", len(data))
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "s.pickle"), filepath.Join(dir, "s.fst")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ImportFile(in, out, Options{}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s, err := LoadPickle(data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := traceBytes(t, s)
	if !bytes.Equal(got, want) {
		t.Errorf("ImportFile wrote %d bytes, LoadPickle's trace is %d", len(got), len(want))
	}
	if s.summary.Events != 400_000 {
		t.Errorf("%d events", s.summary.Events)
	}
}

// FuzzStreamed checks that whatever the streaming path accepts, the whole
// decode accepts too and writes the same trace, and the streaming path on
// workers (in chunks of 64 to 363 bytes) too.
func FuzzStreamed(f *testing.F) {
	for _, name := range []string{"basic.p2.pickle", "basic.p5.pickle", "midrun.p4.pickle", "empty_cache.p4.pickle", "old.p2.pickle"} {
		f.Add(mustReadF(f, name))
	}
	// A real snapshot with stacks (frames lists taken by the decoder).
	if zr, err := gzip.NewReader(bytes.NewReader(mustReadF(f, "real/stacks.pickle.gz"))); err == nil {
		if data, err := io.ReadAll(zr); err == nil {
			f.Add(data)
		}
	}
	alloc := entryPickle("action", "alloc", "addr", 4096, "size", 512, "time_us", 1)
	f.Add(snapshotPickle([][]byte{alloc, {'h', 4}}, nil))
	f.Add(snapshotPickle([][]byte{alloc, entryPickle("action", "oom", "device_free", 7)}, []byte{']', 'h', 4, 'a'}))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := loadPickle(data, Options{Workers: 1}, true, nil)
		// On workers, in small chunks: the same import, or an error too.
		tune := &pickle.ParallelTuning{After: uint32(len(data) % 4), ChunkBytes: 64 + len(data)%300}
		par, perr := loadPickle(data, Options{Workers: 3, tune: tune}, true, nil)
		if (err == nil) != (perr == nil) {
			t.Fatalf("streamed: %v; on workers: %v", err, perr)
		}
		if err != nil {
			return
		}
		whole, err := loadPickle(data, Options{}, false, nil)
		if err != nil {
			t.Fatalf("streamed, but the whole decode fails: %v", err)
		}
		a, sa := written(t, s)
		b, sb := written(t, whole)
		if !bytes.Equal(a, b) || sa != sb {
			t.Fatalf("streamed and whole imports differ:\n%s\n%s", sa, sb)
		}
		if c, sc := written(t, par); !bytes.Equal(a, c) || sa != sc {
			t.Fatalf("streamed and on workers, the imports differ:\n%s\n%s", sa, sc)
		}
	})
}

func mustReadF(f *testing.F, name string) []byte {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		f.Fatal(err)
	}
	return data
}

// TestPrepareCalledOnce checks that the streamed decode calls the writer's
// preparation exactly once, when it has gone through prepareShare of the
// pickle, and not for a pickle that ends before.
func TestPrepareCalledOnce(t *testing.T) {
	name := "ring"
	if longTests() {
		name = "baseline_s1"
	}
	data := gunzip(t, "testdata/real/"+name+".pickle.gz")
	calls, at, est := 0, -1, 0
	var st *streamer
	opt := Options{}
	opt.prepare = func(events int) {
		calls++
		at, est = st.log.Len(), events
	}
	dec := pickle.NewDecoder(data)
	st = &streamer{conv: conv{doc: dec.Doc()}, size: len(data), prepareAt: int(float64(len(data)) * prepareShare), prepare: opt.prepare}
	dec.StreamEntries("device_traces", st)
	if _, err := dec.DecodeDoc(); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || at <= 0 || at >= st.log.Len() {
		t.Fatalf("prepare called %d times, at entry %d of %d; want once, inside the trace", calls, at, st.log.Len())
	}
	if n := st.log.Len(); est < n*9/10 || est > n*11/10 {
		t.Fatalf("prepare expects %d entries; the pickle holds %d", est, n)
	}
	calls = 0
	if _, err := loadPickle(data, opt, true, nil); err != nil || calls != 1 {
		t.Fatalf("loadPickle: prepare called %d times (%v), want once", calls, err)
	}
	calls = 0
	opt.prepare = func(int) { calls++ }
	st = &streamer{conv: conv{doc: dec.Doc()}, size: 10 * len(data), prepareAt: int(float64(10*len(data)) * prepareShare), prepare: opt.prepare}
	dec = pickle.NewDecoder(data)
	st.doc = dec.Doc()
	dec.StreamEntries("device_traces", st)
	if _, err := dec.DecodeDoc(); err != nil || calls != 0 {
		t.Fatalf("prepare called %d times (%v) before its offset", calls, err)
	}
}

// testSnapshots returns every test snapshot, hand-made (testdata/*.pickle)
// and real (testdata/real/*.pickle.gz, decompressed), by file name.
func testSnapshots(t *testing.T) map[string][]byte {
	t.Helper()
	snapshotsOnce.Do(func() {
		names, _ := filepath.Glob("testdata/*.pickle")
		real, _ := filepath.Glob("testdata/real/*.pickle.gz")
		if len(names) < 5 || len(real) < 5 {
			snapshotsErr = fmt.Errorf("found %d and %d test snapshots", len(names), len(real))
			return
		}
		snapshots = map[string][]byte{}
		for _, name := range names {
			snapshots[name] = mustRead(t, filepath.Base(name))
		}
		for _, name := range real {
			if longTests() || everydayReal[strings.TrimSuffix(filepath.Base(name), ".pickle.gz")] {
				snapshots[name] = gunzip(t, name)
			}
		}
	})
	if snapshotsErr != nil {
		t.Fatal(snapshotsErr)
	}
	return maps.Clone(snapshots)
}

// The test snapshots, read once for the package's tests (testSnapshots).
var (
	snapshotsOnce sync.Once
	snapshots     map[string][]byte
	snapshotsErr  error
)

// reference is a test snapshot's import by LoadPickle with Options{}, with
// the package's default tuning: the import the tests that import the
// snapshot in a mode of their own (whole, spilled, on workers) compare
// with. imported makes it once for the package's tests: the real
// snapshots are large, and importing them again in the default mode in
// every such test was most of the package's time under the race detector.
type reference struct {
	trace     []byte // the trace written (written)
	sum       string // the summary, as JSON
	streamErr error  // the streaming path's error: nil when LoadPickle streamed it
	values    int    // the values the import's document kept
	entries   int    // the trace entries, by the summary's counts of actions
	spilled   bool   // whether the import spilled its events
	ok        bool   // made without failing
}

// imported returns the reference import of the test snapshot name (a key
// of testSnapshots), made on first use. A test that changes the package's
// tuning (spill thresholds, parallel minimums, Fork's hold) gets its
// references before it does.
func imported(t *testing.T, name string) *reference {
	t.Helper()
	refs.Lock()
	r := refs.m[name]
	if r == nil {
		r = &refOnce{}
		refs.m[name] = r
	}
	refs.Unlock()
	r.once.Do(func() {
		data, ok := testSnapshots(t)[name]
		if !ok {
			t.Errorf("%s: not a test snapshot", name)
			return
		}
		s, err := loadPickle(data, Options{}, true, nil)
		r.ref.streamErr = err
		if err != nil {
			// What LoadPickle does when the streaming path does not follow.
			if s, err = LoadPickle(data, Options{}); err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
		}
		defer s.Close()
		r.ref.trace, r.ref.sum = written(t, s)
		r.ref.values = s.doc.NumValues()
		for _, counts := range s.summary.Actions {
			for _, k := range counts {
				r.ref.entries += k
			}
		}
		r.ref.spilled = s.raw.spilled()
		r.ref.ok = true
	})
	if !r.ref.ok {
		t.Fatalf("%s: no reference import", name)
	}
	return &r.ref
}

// refs holds the reference imports made so far, by test snapshot.
var refs = struct {
	sync.Mutex
	m map[string]*refOnce
}{m: map[string]*refOnce{}}

type refOnce struct {
	once sync.Once
	ref  reference
}

// everydayReal are the real snapshots the everyday tests import: between
// them, a ring buffer that starts mid-run (ring), a capped run's retries
// (fraction_retry), empty_cache() bursts (empty_cache) and call stacks
// (stacks). With FRAGSIM_LONG=1, the tests import every real snapshot.
var everydayReal = map[string]bool{"ring": true, "fraction_retry": true, "empty_cache": true, "stacks": true}

// longTests reports whether the long sweeps run (FRAGSIM_LONG=1).
func longTests() bool { return os.Getenv("FRAGSIM_LONG") == "1" }

// TestReadyForWorkers checks that the streamer lets the pickle decoder's
// workers start all at once only after alloc and both frees have been
// met, whatever their order, and not for other actions.
func TestReadyForWorkers(t *testing.T) {
	actions := []any{"alloc", "segment_alloc", "free_requested", "oom", "free_completed"}
	doc, err := pickle.NewDecoder(pk(actions)).DecodeDoc()
	if err != nil {
		t.Fatal(err)
	}
	var vs []pickle.Value
	doc.Items(doc.Root(), func(_ int, v pickle.Value) bool { vs = append(vs, v); return true })
	for _, order := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 4, 1, 0}} {
		s := &streamer{conv: conv{doc: doc}}
		for i, k := range order {
			if s.ReadyForWorkers() {
				t.Fatalf("order %v: ready after %d actions", order, i)
			}
			s.action(&event{}, vs[k])
		}
		if !s.ReadyForWorkers() {
			t.Errorf("order %v: not ready after all actions", order)
		}
	}
	s := &streamer{conv: conv{doc: doc}}
	for _, k := range []int{0, 1, 2, 3} {
		s.action(&event{}, vs[k])
	}
	if s.ReadyForWorkers() {
		t.Error("ready without free_completed")
	}
}
