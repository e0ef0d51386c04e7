package pytorch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
	"github.com/klauspost/compress/zstd"
)

type expected struct {
	Counts      map[string]map[string]int `json:"counts"`
	Initial     []trace.Segment           `json:"initial"`
	EmptyCaches int                       `json:"empty_caches"`
	Approximate bool                      `json:"approximate"`
	Streams     []uint64                  `json:"streams"`
	Markers     int                       `json:"markers"`
}

func readExpected(t *testing.T, name string) expected {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e expected
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// importBytes imports data and reads the written trace back.
func importBytes(t *testing.T, data []byte, name string, opt Options) (*Summary, *trace.Header, []trace.Event, *trace.Reader) {
	t.Helper()
	s, err := Load(bytes.NewReader(data), name, opt)
	if err != nil {
		t.Fatal(err)
	}
	r, err := trace.NewReader(bytes.NewReader(traceBytes(t, s)))
	if err != nil {
		t.Fatal(err)
	}
	var evs []trace.Event
	for {
		e, err := r.ReadEvent()
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	return s.Summary(), r.Header(), evs, r
}

var kindAction = map[trace.Kind]string{
	trace.KindAlloc: "alloc", trace.KindFreeRequested: "free_requested", trace.KindFreeCompleted: "free_completed",
	trace.KindSegmentAlloc: "segment_alloc", trace.KindSegmentFree: "segment_free", trace.KindSegmentMap: "segment_map",
	trace.KindSegmentUnmap: "segment_unmap", trace.KindOOM: "oom", trace.KindSnapshot: "snapshot",
}

// traceCounts counts the written events per device and snapshot action.
func traceCounts(evs []trace.Event) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, e := range evs {
		a, ok := kindAction[e.Kind]
		if !ok {
			continue
		}
		d := strconv.Itoa(int(e.Device))
		if out[d] == nil {
			out[d] = map[string]int{}
		}
		out[d][a]++
	}
	return out
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func zstdBytes(t *testing.T, data []byte) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll(data, nil)
}

func TestBasic(t *testing.T) {
	exp := readExpected(t, "basic")
	p5 := mustRead(t, "basic.p5.pickle")
	inputs := map[string][]byte{
		"protocol2": mustRead(t, "basic.p2.pickle"),
		"protocol5": p5,
		"gzip":      mustRead(t, "basic.p5.pickle.gz"),
		"zstd":      zstdBytes(t, p5),
	}
	for name, data := range inputs {
		t.Run(name, func(t *testing.T) {
			sum, h, evs, r := importBytes(t, data, name, Options{})
			if got := traceCounts(evs); !reflect.DeepEqual(got, exp.Counts) {
				t.Errorf("trace counts %v, want the snapshot's %v", got, exp.Counts)
			}
			if !reflect.DeepEqual(sum.Actions, exp.Counts) {
				t.Errorf("summary actions %v, want %v", sum.Actions, exp.Counts)
			}
			if h.Producer != trace.ProducerPyTorch || h.Initial != nil {
				t.Errorf("producer %q, initial %v", h.Producer, h.Initial)
			}
			if !strings.HasPrefix(h.AllocConf, "max_split_size_mb:256,") {
				t.Errorf("alloc conf %q", h.AllocConf)
			}
			if got := h.AllocSettings["max_split_size"]; got != strconv.Itoa(256<<20) {
				t.Errorf("max_split_size setting %q", got)
			}
			if got := h.AllocSettings["expandable_segments"]; got != "False" {
				t.Errorf("expandable_segments setting %q", got)
			}
			div := h.AllocSettings["roundup_power2_divisions"]
			if !strings.HasPrefix(div, `{"1":1,"2":1,"4":1,`) || !strings.HasSuffix(div, `"512":2,"1024":4,"2048":8,"4096":8,"8192":8,"16384":8,"32768":8}`) {
				t.Errorf("divisions flattened to %q", div)
			}
			if sum.EmptyCaches != 0 || sum.Kinds["empty_cache"] != 0 {
				t.Errorf("inferred %d empty caches; the only burst is an OOM's", sum.EmptyCaches)
			}
			// Time order across devices; each device's own order is kept.
			var lastT int64
			var markers []string
			for i, e := range evs {
				if e.TimeNS < lastT {
					t.Fatalf("event %d at %d before %d", i, e.TimeNS, lastT)
				}
				lastT = e.TimeNS
				if e.TimeNS%1000 != 0 || e.TimeNS < 1_764_000_000_000_000_000 {
					t.Fatalf("event %d time %d is not time_us*1000", i, e.TimeNS)
				}
				if e.Kind == trace.KindMarker {
					markers = append(markers, e.Marker.String()+":"+r.String(e.Text))
				}
			}
			if want := []string{"begin:fwd", "end:fwd"}; !reflect.DeepEqual(markers, want) {
				t.Errorf("markers %v, want %v", markers, want)
			}
			var oom, alloc *trace.Event
			for i := range evs {
				if evs[i].Kind == trace.KindOOM {
					oom = &evs[i]
				}
				if evs[i].Kind == trace.KindAlloc && alloc == nil {
					alloc = &evs[i]
				}
			}
			if oom == nil || oom.SizeBytes != 64<<20 || oom.Aux != 123<<20 {
				t.Errorf("oom event %+v", oom)
			}
			if alloc == nil || alloc.Addr != 0x7F3A00000000 || alloc.SizeBytes != 100 {
				t.Fatalf("first alloc %+v", alloc)
			}
			fr := r.Stack(alloc.Stack)
			if len(fr) != 1 || r.String(fr[0].File) != "/app/model.py" || r.String(fr[0].Func) != "attention" || fr[0].Line != 99 {
				t.Errorf("alloc stack %+v", fr)
			}
			var streams []uint64
			for _, s := range sum.Streams {
				streams = append(streams, uint64(s))
			}
			if !reflect.DeepEqual(streams, exp.Streams) || len(sum.Devices) != 2 || sum.Markers != exp.Markers {
				t.Errorf("streams %v devices %v markers %d", streams, sum.Devices, sum.Markers)
			}
		})
	}
}

func TestMidRunInitialState(t *testing.T) {
	exp := readExpected(t, "midrun")
	sum, h, evs, _ := importBytes(t, mustRead(t, "midrun.p4.pickle"), "midrun", Options{})
	if h.Initial == nil {
		t.Fatal("no initial state for a trace that starts mid-run")
	}
	if !reflect.DeepEqual(h.Initial.Segments, exp.Initial) {
		g, _ := json.MarshalIndent(h.Initial.Segments, "", " ")
		w, _ := json.MarshalIndent(exp.Initial, "", " ")
		t.Fatalf("initial state\n%s\nwant\n%s", g, w)
	}
	if len(h.Approximate) != 0 {
		t.Errorf("approximate: %v", h.Approximate)
	}
	if !sum.MidRun || sum.InitialSegs != len(exp.Initial) {
		t.Errorf("summary mid_run %v initial segments %d", sum.MidRun, sum.InitialSegs)
	}
	if got := traceCounts(evs); !reflect.DeepEqual(got, exp.Counts) {
		t.Errorf("counts %v want %v", got, exp.Counts)
	}
}

func TestEmptyCacheInference(t *testing.T) {
	exp := readExpected(t, "empty_cache")
	data := mustRead(t, "empty_cache.p4.pickle")
	sum, _, evs, _ := importBytes(t, data, "empty_cache", Options{})
	if sum.EmptyCaches != exp.EmptyCaches {
		t.Fatalf("inferred %d empty caches, want %d", sum.EmptyCaches, exp.EmptyCaches)
	}
	// Each inferred call directly follows its release burst.
	n := 0
	for i, e := range evs {
		if e.Kind != trace.KindEmptyCache {
			continue
		}
		n++
		if i == 0 || (evs[i-1].Kind != trace.KindSegmentFree && evs[i-1].Kind != trace.KindSegmentUnmap) {
			t.Errorf("empty_cache at %d does not follow a release", i)
		}
		if i+1 < len(evs) && (evs[i+1].Kind == trace.KindOOM || evs[i+1].Kind.IsDevice() && evs[i+1].Kind != trace.KindSegmentAlloc) {
			t.Errorf("empty_cache at %d followed by %v", i, evs[i+1].Kind)
		}
	}
	if n != exp.EmptyCaches {
		t.Errorf("%d empty_cache events written", n)
	}
	if got := traceCounts(evs); !reflect.DeepEqual(got, exp.Counts) {
		t.Errorf("counts %v want %v", got, exp.Counts)
	}
	sum, _, _, _ = importBytes(t, data, "empty_cache", Options{NoInferEmptyCache: true})
	if sum.EmptyCaches != 0 || sum.Kinds["empty_cache"] != 0 {
		t.Errorf("inference off still inferred %d", sum.EmptyCaches)
	}
	// With a known cap that the second burst's malloc would cross, that burst
	// is the malloc's own retry.
	sum, _, _, _ = importBytes(t, data, "empty_cache", Options{MemoryCapBytes: 30 << 20})
	if sum.EmptyCaches != exp.EmptyCaches-1 {
		t.Errorf("with a 30 MiB cap inferred %d, want %d", sum.EmptyCaches, exp.EmptyCaches-1)
	}
}

func TestGCBurstIsApproximate(t *testing.T) {
	exp := readExpected(t, "gc")
	sum, h, _, _ := importBytes(t, mustRead(t, "gc.p4.pickle"), "gc", Options{})
	if sum.EmptyCaches != exp.EmptyCaches {
		t.Errorf("inferred %d empty caches, want %d", sum.EmptyCaches, exp.EmptyCaches)
	}
	found := false
	for _, a := range h.Approximate {
		if strings.Contains(a, "garbage collection") {
			found = true
		}
	}
	if found != exp.Approximate {
		t.Errorf("approximate notes %v", h.Approximate)
	}
}

func TestOldSnapshotMissingKeys(t *testing.T) {
	exp := readExpected(t, "old")
	sum, h, evs, _ := importBytes(t, mustRead(t, "old.p2.pickle"), "old", Options{})
	if got := traceCounts(evs); !reflect.DeepEqual(got, exp.Counts) {
		t.Errorf("counts %v want %v", got, exp.Counts)
	}
	if h.AllocConf != "" || h.AllocSettings != nil || len(h.Approximate) == 0 {
		t.Errorf("header %+v", h)
	}
	if sum.Events != len(evs) || sum.FirstNS != 0 {
		t.Errorf("summary %+v", sum)
	}
}

func TestTruncatedSnapshot(t *testing.T) {
	data := mustRead(t, "basic.p5.pickle")
	for _, n := range []int{0, 3, len(data) / 4, len(data) / 2, len(data) - 1} {
		_, err := Load(bytes.NewReader(data[:n]), "cut.pickle", Options{})
		if err == nil {
			t.Fatalf("cut at %d: no error", n)
		}
		if !errors.Is(err, pickle.ErrTruncated) && n > 0 {
			t.Errorf("cut at %d: %v is not ErrTruncated", n, err)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "cut.pickle: ") || !strings.Contains(msg, "byte offset") || strings.Contains(msg, "\n") {
			t.Errorf("cut at %d: message %q should name the file and the byte offset on one line", n, msg)
		}
	}
	// A gzip'd file cut short fails too.
	gz := mustRead(t, "basic.p5.pickle.gz")
	if _, err := Load(bytes.NewReader(gz[:len(gz)/2]), "cut.gz", Options{}); err == nil {
		t.Error("cut gzip: no error")
	}
}

const pwned = "/tmp/fragsim-pickle-pwned"

func TestRefusesCode(t *testing.T) {
	os.Remove(pwned)
	data, err := os.ReadFile("../pickle/testdata/evil_reduce.p4.pickle")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(bytes.NewReader(data), "evil.pickle", Options{})
	if !errors.Is(err, pickle.ErrUnsafe) || !strings.Contains(err.Error(), "STACK_GLOBAL") {
		t.Fatalf("err = %v, want the STACK_GLOBAL opcode refused", err)
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatal("the payload ran")
	}
}

func TestImportFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "basic.fst")
	sum, err := ImportFile("testdata/basic.p2.pickle", out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := trace.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for {
		if _, err := f.ReadEvent(); err != nil {
			break
		}
		n++
	}
	if n != sum.Events || sum.InputBytes == 0 {
		t.Errorf("read %d events, summary says %d", n, sum.Events)
	}
	// A file cut before any trace entry leaves nothing behind.
	bad := filepath.Join(dir, "bad.pickle")
	full := mustRead(t, "basic.p2.pickle")
	if err := os.WriteFile(bad, full[:40], 0o644); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(dir, "bad.fst")
	if _, err := ImportFile(bad, out2, Options{}); err == nil {
		t.Fatal("no error on a cut file")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "basic.fst" && e.Name() != "bad.pickle" {
			t.Errorf("left %s behind", e.Name())
		}
	}
}

// TestSalvageCutSnapshot cuts a snapshot at many points: the import fails
// with the cut's offset, and the events it keeps are exactly the first
// events of the whole snapshot's import.
func TestSalvageCutSnapshot(t *testing.T) {
	full := mustRead(t, "empty_cache.p4.pickle")
	whole, err := LoadPickle(full, Options{NoInferEmptyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	wantAll := events(t, whole)
	kept := 0
	for cut := 100; cut < len(full); cut += 97 {
		s, err := LoadPickle(full[:cut], Options{NoInferEmptyCache: true})
		if !errors.Is(err, pickle.ErrTruncated) {
			t.Fatalf("cut at %d: err %v", cut, err)
		}
		if s == nil {
			continue
		}
		kept++
		got, want := events(t, s), wantAll
		if len(got) == 0 || len(got) > len(want) {
			t.Fatalf("cut at %d: kept %d of %d events", cut, len(got), len(want))
		}
		for i := range got {
			// The frames lists are compared by their frames: the two
			// decodes number their values differently.
			a, b := got[i], want[i]
			if a.Event() != b.Event() || textOf(s, a.text) != textOf(whole, b.text) || frameText(s, a.frames) != frameText(whole, b.frames) {
				t.Fatalf("cut at %d: event %d is %+v, want %+v", cut, i, a, b)
			}
		}
		if h := s.Header(); h.Initial != nil || len(h.Approximate) == 0 || !strings.Contains(h.Approximate[0], "cut short") {
			t.Fatalf("cut at %d: header %+v", cut, h)
		}
	}
	if kept < 5 {
		t.Errorf("only %d cuts kept events", kept)
	}
}

func TestRoundSize(t *testing.T) {
	s := settings{}
	s.divisions[0] = 4
	cases := map[uint64]uint64{1: 512, 512: 512, 1200: 1536, 3000: 3072, 1_500_000: 1_572_864, 1 << 21: 1 << 21}
	for n, want := range cases {
		if got := s.roundSize(n); got != want {
			t.Errorf("roundSize(%d) = %d, want %d", n, got, want)
		}
	}
}

// textOf returns s's text i ("" for none).
func textOf(s *Snapshot, i int32) string {
	if i == 0 {
		return ""
	}
	return s.texts[i]
}

// frameText renders the stack f of s ("" for none).
func frameText(s *Snapshot, f pickle.Value) string {
	if f == noFrames {
		return ""
	}
	out := ""
	for _, fr := range s.stacks.stacks[f] {
		file, _ := s.doc.Str(fr.file)
		name, _ := s.doc.Str(fr.name)
		out += fmt.Sprintf("%s:%s:%d;", file, name, fr.line)
	}
	return out
}
