package report

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// prefixes holds the trace prefixes cut so far, by path and length: each
// is cut once per test binary, whichever tests share it.
var prefixes sync.Map // prefixKey -> *prefixEntry

type prefixKey struct {
	path string
	n    int64
}

type prefixEntry struct {
	once sync.Once
	data []byte
	err  error
}

// tracePrefix returns the first n events of the committed trace at path,
// written as a trace in memory under the trace's own header, its strings
// and stacks carried over: the same recording, stopped early (what is
// live at the cut stays live, as in any trace that ends mid-run). A cut
// keeps the pattern of the run's start (its captures, its pools, its
// empty_cache() calls) at a fraction of the replay's cost under -race.
func tracePrefix(t *testing.T, path string, n int64) []byte {
	t.Helper()
	v, _ := prefixes.LoadOrStore(prefixKey{path, n}, &prefixEntry{})
	e := v.(*prefixEntry)
	e.once.Do(func() { e.data, e.err = cutTrace(path, n) })
	if e.err != nil {
		t.Fatalf("%s: first %d events: %v", path, n, e.err)
	}
	return e.data
}

func cutTrace(path string, n int64) ([]byte, error) {
	f, err := trace.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, f.Header())
	if err != nil {
		return nil, err
	}
	ids := trace.NewRemap(f.Reader, w)
	var read int64
	for read < n {
		e, err := f.ReadEvent()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the trace is shorter")
		}
		if err != nil {
			return nil, err
		}
		read++
		e = ids.Event(e)
		if err := w.WriteEvent(e); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// kindsOf counts a trace's events by kind, and its pool_begin events on
// stream 0 (a torch.cuda.MemPool's; a CUDA graph captures on its own
// stream) under KindInvalid: what a fixture must hold for the pattern it
// stands for.
func kindsOf(t *testing.T, data []byte) map[trace.Kind]int {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := map[trace.Kind]int{}
	for {
		e, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		n[e.Kind]++
		if e.Kind == trace.KindPoolBegin && e.Stream == 0 {
			n[trace.KindInvalid]++
		}
	}
}

// vizTrace is the trace the memory_viz export tests export: a recorded
// run whose empty_cache() calls free segments mid-run under both
// policies, so that the segment entries' running sum peaks above where it
// ends and the export's sums are checked on frees and unmaps too (the
// built-in trace never frees a segment: its peak is its end).
const vizTrace = "../../traces/conformance/empty_cache_mixed.fst"

// vizExport is an export of vizTrace and the replay's result.
type vizExport struct {
	once sync.Once
	data []byte
	res  *replay.Result
	err  error
}

var vizExports sync.Map // policy -> *vizExport

// exportViz exports vizTrace under policy, once per policy for the tests
// that read the same snapshot.
func exportViz(t *testing.T, policy string) ([]byte, *replay.Result) {
	t.Helper()
	v, _ := vizExports.LoadOrStore(policy, &vizExport{})
	x := v.(*vizExport)
	x.once.Do(func() {
		var buf bytes.Buffer
		x.res, x.err = WriteMemoryViz(&buf, replay.OpenFile(vizTrace), ExportOptions{Policy: policy})
		x.data = buf.Bytes()
	})
	if x.err != nil {
		t.Fatalf("%s under %s: %v", vizTrace, policy, x.err)
	}
	return x.data, x.res
}
