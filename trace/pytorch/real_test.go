package pytorch

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// Real snapshots recorded with PyTorch 2.11.0+cu130 on an H200 by
// traces/workloads/record_snapshots.sh; manifest.json holds the counts
// Python computed from each snapshot and the run's memory fraction.
type realRun struct {
	AllocConf      string                    `json:"alloc_conf"`
	Fraction       float64                   `json:"fraction"`
	TotalGlobalMem uint64                    `json:"total_global_mem"`
	Counts         map[string]map[string]int `json:"counts_per_device"`
	Retries        int                       `json:"num_alloc_retries"`
	OOMs           int                       `json:"num_ooms"`
	SegmentsAtEnd  int                       `json:"segments_at_end"`
}

func readReal(t *testing.T) map[string]realRun {
	t.Helper()
	raw, err := os.ReadFile("testdata/real/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]realRun
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func gunzip(t *testing.T, path string) []byte {
	t.Helper()
	if data, ok := gunzipped.Load(path); ok {
		return bytes.Clone(data.([]byte))
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	gunzipped.Store(path, data)
	return bytes.Clone(data)
}

// gunzipped holds the files gunzip read, by path, for the package's tests
// to share: decompressing costs more than a copy under the race detector.
var gunzipped sync.Map

// finalState decodes the snapshot's final segments independently of the
// importer: segment base -> size, and live block address -> state.
func finalState(t *testing.T, data []byte) (map[uint64]uint64, map[uint64]string, [][]any) {
	t.Helper()
	v, err := pickle.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	top := v.(*pickle.Dict)
	segs := map[uint64]uint64{}
	blocks := map[uint64]string{}
	sv, _ := top.Get("segments")
	for _, s := range sv.(*pickle.List).Items {
		sd := s.(*pickle.Dict)
		segs[getUint(sd, "address")] = getUint(sd, "total_size")
		bv, _ := sd.Get("blocks")
		for _, b := range bv.(*pickle.List).Items {
			bd := b.(*pickle.Dict)
			if st, _ := getString(bd, "state"); st != "inactive" {
				blocks[getUint(bd, "address")] = st
			}
		}
	}
	dv, _ := top.Get("device_traces")
	var traces [][]any
	for _, d := range dv.(*pickle.List).Items {
		traces = append(traces, d.(*pickle.List).Items)
	}
	return segs, blocks, traces
}

func TestRealSnapshots(t *testing.T) {
	runs := readReal(t)
	if len(runs) == 0 {
		t.Fatal("no real snapshots")
	}
	for name, run := range runs {
		if !longTests() && !everydayReal[name] {
			continue // long: set FRAGSIM_LONG=1
		}
		t.Run(name, func(t *testing.T) {
			gz, err := os.ReadFile(filepath.Join("testdata/real", name+".pickle.gz"))
			if err != nil {
				t.Fatal(err)
			}
			data := gunzip(t, filepath.Join("testdata/real", name+".pickle.gz"))
			opt := Options{}
			if run.Fraction > 0 {
				opt.MemoryCapBytes = uint64(run.Fraction * float64(run.TotalGlobalMem))
				opt.MemoryFraction = run.Fraction
			}
			sum, h, evs, _ := importBytes(t, gz, name, opt)
			// Counts per action and device equal the snapshot's own.
			if got := traceCounts(evs); !reflect.DeepEqual(got, run.Counts) {
				t.Errorf("trace counts %v\nwant %v", got, run.Counts)
			}
			if !reflect.DeepEqual(sum.Actions, run.Counts) {
				t.Errorf("summary actions %v\nwant %v", sum.Actions, run.Counts)
			}
			if h.AllocConf != run.AllocConf || h.AllocSettings["expandable_segments"] == "" {
				t.Errorf("alloc conf %q settings %v, want %q", h.AllocConf, h.AllocSettings, run.AllocConf)
			}
			for i := 1; i < len(evs); i++ {
				if evs[i].TimeNS < evs[i-1].TimeNS {
					t.Fatalf("event %d goes back in time", i)
				}
			}

			segs, blocks, traces := finalState(t, data)
			// Replaying the trace forward from the rebuilt initial state
			// must give the snapshot's final segments and live blocks.
			gotSegs := map[uint64]uint64{}
			gotBlocks := map[uint64]bool{}
			if h.Initial != nil {
				for _, s := range h.Initial.Segments {
					gotSegs[s.Addr] = s.SizeBytes
					var sum uint64
					for _, b := range s.Blocks {
						sum += b.SizeBytes
						if b.State != trace.BlockInactive {
							gotBlocks[b.Addr] = true
						}
					}
					if sum != s.SizeBytes {
						t.Errorf("initial segment %#x: blocks sum to %d, segment is %d", s.Addr, sum, s.SizeBytes)
					}
				}
			}
			expandable := strings.Contains(run.AllocConf, "expandable_segments:True")
			for _, e := range evs {
				switch e.Kind {
				case trace.KindAlloc:
					gotBlocks[e.Addr] = true
				case trace.KindFreeCompleted:
					delete(gotBlocks, e.Addr)
				case trace.KindSegmentAlloc:
					gotSegs[e.Addr] = e.SizeBytes
				case trace.KindSegmentFree:
					delete(gotSegs, e.Addr)
				}
			}
			if !expandable && !reflect.DeepEqual(gotSegs, segs) {
				t.Errorf("segments after the trace: %d, snapshot has %d", len(gotSegs), len(segs))
			}
			if len(gotBlocks) != len(blocks) {
				t.Errorf("live blocks after the trace: %d, snapshot has %d", len(gotBlocks), len(blocks))
			}
			for a := range blocks {
				if !gotBlocks[a] {
					t.Errorf("block %#x live in the snapshot, not after the trace", a)
					break
				}
			}

			// Release bursts counted independently of the importer.
			bursts, beforeOOM := 0, 0
			tr := traces[0]
			for i := 0; i < len(tr); i++ {
				a, _ := getString(tr[i].(*pickle.Dict), "action")
				if a != "segment_free" && a != "segment_unmap" {
					continue
				}
				j := i
				for ; j < len(tr); j++ {
					if a, _ := getString(tr[j].(*pickle.Dict), "action"); a != "segment_free" && a != "segment_unmap" {
						break
					}
				}
				bursts++
				if j < len(tr) {
					if a, _ := getString(tr[j].(*pickle.Dict), "action"); a == "oom" {
						beforeOOM++
					}
				}
				i = j - 1
			}
			switch name {
			case "empty_cache", "expandable_empty":
				// empty_cache() after every step or every third: every burst is one.
				if sum.EmptyCaches != bursts || bursts == 0 {
					t.Errorf("inferred %d empty_caches from %d bursts", sum.EmptyCaches, bursts)
				}
			case "fraction_retry", "gc_threshold":
				// No empty_cache() call in these runs: with the cap known,
				// every burst is a retry, an OOM's release or GC.
				if sum.EmptyCaches != 0 {
					t.Errorf("inferred %d empty_caches in a run without any (%d bursts, %d before an OOM)", sum.EmptyCaches, bursts, beforeOOM)
				}
				if name == "gc_threshold" && len(h.Approximate) == 0 {
					t.Error("GC-or-empty_cache bursts not flagged approximate")
				}
			default:
				if sum.EmptyCaches != 0 || bursts != 0 {
					t.Errorf("%d bursts, %d empty_caches inferred", bursts, sum.EmptyCaches)
				}
			}
			if name == "ring" {
				if h.Initial == nil || !sum.MidRun || len(h.Approximate) != 0 {
					t.Errorf("ring buffer: initial %v, approximate %v", h.Initial != nil, h.Approximate)
				}
			} else if h.Initial != nil {
				t.Errorf("a run recorded from its start has an initial state of %d segments", len(h.Initial.Segments))
			}
		})
	}
}

// TestRealSnapshotWithoutCap shows the documented limit: without the cap,
// the successful retries of a capped run read as empty_cache() calls.
func TestRealSnapshotWithoutCap(t *testing.T) {
	gz, err := os.ReadFile("testdata/real/fraction_retry.pickle.gz")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Load(bytes.NewReader(gz), "fraction_retry", Options{})
	if err != nil {
		t.Fatal(err)
	}
	withCap := readReal(t)["fraction_retry"]
	if withCap.Retries != withCap.OOMs {
		t.Skip("every retry of this run failed: nothing to show")
	}
	if s.Summary().EmptyCaches != 0 {
		t.Errorf("inferred %d: every burst of this run precedes an OOM", s.Summary().EmptyCaches)
	}
}

// TestImportFileMapped checks that importing a snapshot file large enough
// to be mapped into memory, plain and gzip'd, writes the same trace as
// Load and Emit of its bytes.
func TestImportFileMapped(t *testing.T) {
	name := "ring"
	if longTests() {
		name = "baseline_s1"
	}
	data := gunzip(t, "testdata/real/"+name+".pickle.gz")
	if len(data) < minMapBytes {
		t.Fatalf("snapshot of %d bytes is too small to be mapped", len(data))
	}
	s, err := LoadPickle(data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := traceBytes(t, s)
	var gz bytes.Buffer // stored, not compressed: large enough to be mapped
	zw, _ := gzip.NewWriterLevel(&gz, gzip.NoCompression)
	zw.Write(data)
	zw.Close()
	dir := t.TempDir()
	for name, content := range map[string][]byte{"plain.pickle": data, "stored.pickle.gz": gz.Bytes()} {
		in := filepath.Join(dir, name)
		if err := os.WriteFile(in, content, 0o644); err != nil {
			t.Fatal(err)
		}
		out := in + ".fst"
		sum, err := ImportFile(in, out, Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if sum.Events != s.Summary().Events {
			t.Errorf("%s: %d events, want %d", name, sum.Events, s.Summary().Events)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: trace differs from Load+Emit (%d vs %d bytes)", name, len(got), len(want))
		}
	}
}

// getUint is the int at key of a snapshot dict taken as Go values, as a
// uint64 (0 when missing).
func getUint(d *pickle.Dict, key string) uint64 {
	i, _ := getInt(d, key)
	return uint64(i)
}

// TestImportReusesMemory imports real snapshots one after the other in one
// process, in several orders: an import takes the memory of the ones
// before (the events' log, the chunk handlers, the writer's jobs and
// encoders), which must give the bytes a first import gave, even with the
// reused events' memory filled with garbage; and imports must leave their
// events' memory for the next.
func TestImportReusesMemory(t *testing.T) {
	poisonEvents = true
	defer func() { poisonEvents = false }()
	names := []string{"ring", "fraction_retry", "stacks", "empty_cache"}
	if longTests() {
		names = []string{"baseline_s1", "ring", "stacks_agents", "expandable_empty"}
	}
	dir := t.TempDir()
	first := map[string][]byte{}
	for _, name := range names {
		in := filepath.Join(dir, name+".pickle")
		if err := os.WriteFile(in, gunzip(t, "testdata/real/"+name+".pickle.gz"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kept := 0 // imports whose log was left for the next (the race detector's pools drop a quarter)
	for round, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 0, 3, 2, 0}} {
		for _, i := range order {
			name := names[i]
			in := filepath.Join(dir, name+".pickle")
			if _, err := ImportFile(in, in+".fst", Options{}); err != nil {
				t.Fatalf("round %d, %s: %v", round, name, err)
			}
			if mem, reused := newEvents(0, 1); reused {
				kept++
				putEvents(mem)
			}
			got, err := os.ReadFile(in + ".fst")
			if err != nil {
				t.Fatal(err)
			}
			if want, ok := first[name]; !ok {
				first[name] = got
			} else if !bytes.Equal(got, want) {
				t.Errorf("round %d, %s: trace differs from the first import's (%d vs %d bytes)", round, name, len(got), len(want))
			}
		}
	}
	if kept == 0 {
		t.Error("no import left its events' memory for the next")
	}
}
