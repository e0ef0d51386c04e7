package pytorch

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace/pickle"
)

// withSpill makes snapshots of more than events entries spill, in blocks
// of block events, until the function it returns is called (or the test
// ends).
func withSpill(t testing.TB, events, block int) func() {
	oldEvents, oldBlock, oldCopy := spillEvents, spillBlock, mergeCopyMin
	// Merge's copies on other goroutines too, across the spills.
	spillEvents, spillBlock, mergeCopyMin = events, block, 1
	restore := func() { spillEvents, spillBlock, mergeCopyMin = oldEvents, oldBlock, oldCopy }
	t.Cleanup(restore)
	return restore
}

// emptyDir fails the test if dir holds anything.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left %s behind in %s", e.Name(), dir)
	}
}

// loadBoth imports data in memory and spilled beyond events (in blocks of
// block events, into dir), by
// the path the import takes and, when the snapshot streams, decoded as a
// whole, and checks that the traces and summaries are the same. The
// import in memory is ref's when ref is not nil (a test snapshot imported
// with Options{}: opt must be Options{} then). It returns the spilled
// import (not closed).
func loadBoth(t *testing.T, name string, data []byte, opt Options, ref *reference, dir string, events, block int) *Snapshot {
	t.Helper()
	if ref == nil {
		mem, err := LoadPickle(data, opt)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer mem.Close()
		ref = &reference{spilled: mem.raw.spilled()}
		ref.trace, ref.sum = written(t, mem)
		// Whether the streaming path follows the snapshot in memory.
		_, ref.streamErr = loadPickle(data, opt, true, nil)
	}
	if ref.spilled {
		t.Fatalf("%s: events spilled below the threshold", name)
	}
	wantTrace, wantSum, memErr := ref.trace, ref.sum, ref.streamErr
	defer withSpill(t, events, block)()
	opt.SpillDir = dir
	var out *Snapshot
	for _, stream := range []bool{true, false} {
		s, err := loadPickle(data, opt, stream, nil)
		if err != nil {
			if stream && memErr != nil && errors.Is(err, errFallback) {
				continue // a snapshot the streaming path does not follow
			}
			t.Fatalf("%s (streamed %v): %v", name, stream, err)
		}
		if s.raw.Len() > events && !s.raw.spilled() {
			t.Errorf("%s (streamed %v): %d events not spilled", name, stream, s.raw.Len())
		}
		gotTrace, gotSum := written(t, s)
		if !bytes.Equal(gotTrace, wantTrace) {
			t.Errorf("%s (streamed %v): spilled trace differs (%d and %d bytes)", name, stream, len(gotTrace), len(wantTrace))
		}
		if gotSum != wantSum {
			t.Errorf("%s (streamed %v): spilled summary\n%s\nwant\n%s", name, stream, gotSum, wantSum)
		}
		if out == nil {
			out = s
		} else {
			s.Close()
		}
	}
	return out
}

// TestSpilledMatchesMemory imports every test snapshot, hand-made and
// real, with its events in memory and spilled to a file in blocks of
// three (a thousand for the real ones): the traces are byte for byte the
// same, and no file is left. The import in memory with Options{} is the
// package's reference (imported), made once for the tests that compare
// with it.
func TestSpilledMatchesMemory(t *testing.T) {
	dir := t.TempDir()
	for name, data := range testSnapshots(t) {
		// Blocks of three for the hand-made snapshots; of a thousand,
		// and less often, for the real ones (a hundred thousand entries).
		events, block, opts := 5, 3, []Options{{}, {NoInferEmptyCache: true}, {MemoryCapBytes: 1 << 30}}
		if strings.HasSuffix(name, ".gz") {
			events, block, opts = 4096, 1000, opts[:1]
		}
		for i, opt := range opts {
			var ref *reference // the in-memory import with Options{}: the package's
			if i == 0 {
				ref = imported(t, name)
			}
			s := loadBoth(t, name, data, opt, ref, dir, events, block)
			s.Close()
		}
	}
	emptyDir(t, dir)
}

// TestSpilledSynthetic imports a made-up snapshot of several devices with
// annotations, snapshots, OOMs, unknown actions, entries without an action
// or a time, release bursts and a key added to an entry after its list
// took it, spilled in blocks of three: the same trace as in memory.
func TestSpilledSynthetic(t *testing.T) {
	var devs [][]byte
	actions := []string{"segment_alloc", "alloc", "free_requested", "free_completed", "segment_free", "segment_free", "alloc",
		"annotate", "snapshot", "oom", "mystery", "segment_alloc", "segment_unmap", "segment_map"}
	for d := range 3 {
		var ds [][]byte
		for i := range 40 + 7*d {
			act := actions[(i+d)%len(actions)]
			pairs := []any{"action", act, "addr", 4096 * (i % 9), "size", 2 << (i % 5), "stream", i % 2}
			switch {
			case act == "oom":
				pairs = append(pairs, "device_free", 77)
			case act == "annotate":
				pairs = append(pairs, "user_metadata", "step")
			case i%11 == 3:
				pairs = pairs[2:] // no action
			}
			if i%5 != 4 {
				pairs = append(pairs, "time_us", 100*d+3*i)
			}
			ds = append(ds, entryPickle(pairs...))
		}
		devs = append(devs, bytes.Join(ds, nil))
	}
	// Three device lists: the second and third are pushed after the first
	// (memo 3 is the first list; lists 2 and 3 are new lists).
	p := []byte{0x80, 4, '}', 0x94, '('}
	p = appendStr(p, "device_traces")
	p = append(p, 0x94, ']', 0x94, '(')
	for _, d := range devs {
		p = append(p, ']', '(')
		p = append(p, d...)
		p = append(p, 'e')
	}
	p = append(p, 'e')
	p = appendStr(p, "external_annotations")
	p = append(p, ']', '(')
	for i, dev := range []int{1, 0, 5, 1} {
		p = append(p, '}', '(')
		p = appendStr(p, "device")
		p = append(p, 'K', byte(dev))
		p = appendStr(p, "time_us")
		p = append(p, 'M', byte(40*i), 0)
		p = appendStr(p, "stage")
		p = appendStr(p, []string{"START", "END", "X", "START"}[i])
		p = appendStr(p, "name")
		p = appendStr(p, "mark")
		p = append(p, 'u')
	}
	p = append(p, 'e', 'u', '.')
	dir := t.TempDir()
	s := loadBoth(t, "synthetic", p, Options{}, nil, dir, 5, 3)
	if len(s.seqs) != 4 || s.summary.EmptyCaches == 0 || s.summary.Markers != 4 || len(s.summary.UnknownActs) != 2 {
		t.Errorf("%d sequences, %d empty_caches, %d markers, unknown %v", len(s.seqs), s.summary.EmptyCaches, s.summary.Markers, s.summary.UnknownActs)
	}
	s.Close()
	emptyDir(t, dir)
}

// TestSpillWindow checks that an entry changed while among the latest is
// followed when spilled, and that one changed later sends the snapshot to
// the whole decode, which gives the same trace.
func TestSpillWindow(t *testing.T) {
	var entries [][]byte
	for i := range 30 {
		entries = append(entries, entryPickle("action", "alloc", "addr", 512*i, "size", 512, "time_us", i))
	}
	// Memo 4 + i is entry i. Entry 0 gets a stream after entry 29 exists.
	late := append([]byte{}, entries[29]...)
	late = append(late, 'h', 4)
	late = appendStr(late, "stream")
	late = append(late, 'K', 7, 's', '0')
	data := snapshotPickle(append(entries[:29:29], late), nil)
	dir := t.TempDir()
	restore := withSpill(t, 5, 3)
	if _, err := loadPickle(data, Options{SpillDir: dir}, true, nil); !errors.Is(err, errFallback) {
		t.Fatalf("streamed with an entry changed out of the window: %v", err)
	}
	s, err := LoadPickle(data, Options{SpillDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	got, gotSum := written(t, s)
	if evs := events(t, s); len(evs) != 30 || evs[0].Stream != 7 || !s.raw.spilled() {
		t.Errorf("%d events, the first on stream %d, spilled %v", len(evs), evs[0].Stream, s.raw.spilled())
	}
	s.Close()
	restore()
	mem, err := LoadPickle(data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want, wantSum := written(t, mem); !bytes.Equal(got, want) || gotSum != wantSum {
		t.Errorf("late change: the spilled import's trace differs from the in-memory one")
	}
	// Changed while recent: streamed.
	recent := append([]byte{}, entries[1]...)
	recent = append(recent, 'h', 5)
	recent = appendStr(recent, "stream")
	recent = append(recent, 'K', 9, 's', '0')
	data = snapshotPickle(append([][]byte{entries[0], recent}, entries[2:]...), nil)
	defer withSpill(t, 5, 3)()
	st, err := loadPickle(data, Options{SpillDir: dir}, true, nil)
	if err != nil {
		t.Fatalf("an entry changed while recent: %v", err)
	}
	if evs := events(t, st); len(evs) != 30 || evs[1].Stream != 9 || !st.raw.spilled() {
		t.Errorf("%d events, the second on stream %d, spilled %v", len(evs), evs[1].Stream, st.raw.spilled())
	}
	st.Close()
	emptyDir(t, dir)
}

// TestImportFileSpillsNextToOutput imports a spilled snapshot with
// ImportFile, and a cut one, and one whose entries are not dicts: the
// output directory holds the input and the trace only, and the trace is
// the one of the in-memory import.
func TestImportFileSpillsNextToOutput(t *testing.T) {
	data := gunzip(t, "testdata/real/ring.pickle.gz")
	mem, err := LoadPickle(data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := traceBytes(t, mem)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "s.pickle"), filepath.Join(dir, "s.fst")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	withSpill(t, 1000, 256)
	if _, err := ImportFile(in, out, Options{}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("spilled ImportFile wrote %d bytes, the in-memory import %d", len(got), len(want))
	}
	// Cut short: a trace of the entries before the cut, and the error.
	if err := os.WriteFile(in, data[:len(data)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ImportFile(in, out, Options{}); !errors.Is(err, pickle.ErrTruncated) {
		t.Fatalf("cut snapshot: %v", err)
	}
	// Not a dict as an entry: the whole decode's error, no trace.
	var ok [][]byte
	for range 1500 {
		ok = append(ok, entryPickle("action", "alloc"))
	}
	bad := snapshotPickle(append(ok, []byte{'K', 3}), nil)
	if err := os.WriteFile(in, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(out)
	if _, err := ImportFile(in, out, Options{}); err == nil || !strings.Contains(err.Error(), "not a dict") {
		t.Fatalf("entry not a dict: %v", err)
	}
	os.Remove(in)
	emptyDir(t, dir)
	// A spill directory that cannot be written: a clear error.
	s, err := LoadPickle(data, Options{SpillDir: filepath.Join(dir, "missing")})
	var se *SpillError
	if s != nil || !errors.As(err, &se) {
		t.Fatalf("spill into a missing directory: %v", err)
	}
}

// TestRealSnapshotsSpilled imports every real snapshot of .dev/snapshots
// (local only: skipped without it) in memory and spilled: the same trace.
func TestRealSnapshotsSpilled(t *testing.T) {
	names, _ := filepath.Glob("../../.dev/snapshots/*.pickle")
	if len(names) == 0 {
		t.Skip("no snapshots in .dev/snapshots")
	}
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		mem, err := LoadPickle(data, Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, wantSum := written(t, mem)
		mem.Close()
		restore := withSpill(t, 4096, 1000)
		s, err := LoadPickle(data, Options{SpillDir: dir})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !s.raw.spilled() {
			t.Errorf("%s: not spilled", name)
		}
		got, gotSum := written(t, s)
		s.Close()
		restore()
		if !bytes.Equal(got, want) || gotSum != wantSum {
			t.Errorf("%s: spilled trace of %d bytes, in memory %d", name, len(got), len(want))
		}
	}
	emptyDir(t, dir)
}

// FuzzSpilled checks that whatever the import accepts, it writes the same
// trace and summary with its events spilled in blocks of two.
func FuzzSpilled(f *testing.F) {
	for _, name := range []string{"basic.p2.pickle", "basic.p5.pickle", "midrun.p4.pickle", "empty_cache.p4.pickle", "old.p2.pickle", "gc.p4.pickle"} {
		f.Add(mustReadF(f, name))
	}
	alloc := entryPickle("action", "alloc", "addr", 4096, "size", 512, "time_us", 1)
	f.Add(snapshotPickle([][]byte{alloc, {'h', 4}}, nil))
	f.Add(snapshotPickle([][]byte{alloc, entryPickle("action", "oom", "device_free", 7)}, []byte{']', 'h', 4, 'a'}))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		mem, err := LoadPickle(data, Options{})
		if err != nil {
			return
		}
		want, wantSum := written(t, mem)
		restore := withSpill(t, 2, 2)
		s, err := LoadPickle(data, Options{SpillDir: dir})
		if err != nil {
			restore()
			t.Fatalf("in memory, but not spilled: %v", err)
		}
		got, gotSum := written(t, s)
		s.Close()
		restore()
		if !bytes.Equal(got, want) || gotSum != wantSum {
			t.Fatalf("spilled and in-memory imports differ:\n%s\n%s", gotSum, wantSum)
		}
		emptyDir(t, dir)
	})
}
