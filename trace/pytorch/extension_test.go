package pytorch

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// extSnapshot is a snapshot of one device with two entries (an alloc of
// 1 MiB and its free) and the "fragsim" key written by ext.
func extSnapshot(t *testing.T, ext func(e *pickle.Encoder)) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := pickle.NewEncoder(&buf)
	e.BeginDict()
	e.Str("device_traces")
	e.BeginList()
	e.BeginList()
	for i, act := range []string{"segment_alloc", "alloc", "free_requested", "free_completed"} {
		e.BeginDict()
		e.Str("action")
		e.Str(act)
		e.Str("addr")
		e.Int(1 << 32)
		e.Str("size")
		e.Int(map[bool]int64{true: 2 << 20, false: 1 << 20}[i == 0])
		e.Str("stream")
		e.Int(0)
		e.Str("time_us")
		e.Int(int64(1000 + i))
		e.EndDict()
	}
	e.EndList()
	e.EndList()
	e.Str("segments")
	e.BeginList()
	e.EndList()
	e.Str("fragsim")
	ext(e)
	e.EndDict()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// extKey writes a "fragsim" key of the version, header and events given,
// each event [place, kind, time_ns, stream, aux, size, marker, text].
func extKey(version int64, header string, events ...[]any) func(*pickle.Encoder) {
	return func(e *pickle.Encoder) {
		e.BeginDict()
		e.Str("version")
		e.Int(version)
		e.Str("header")
		e.Str(header)
		e.Str("events")
		e.BeginList()
		e.BeginList()
		for _, ev := range events {
			e.BeginList()
			for _, f := range ev {
				switch x := f.(type) {
				case int:
					e.Int(int64(x))
				case uint64:
					e.Uint(x)
				case string:
					e.Str(x)
				}
			}
			e.EndList()
		}
		e.EndList()
		e.EndList()
		e.EndDict()
	}
}

// The "fragsim" key's events go where they say among the entries, its
// header fills what a snapshot cannot say, and nothing is inferred.
func TestExtensionEvents(t *testing.T) {
	half := math.Float64bits(0.5)
	data := extSnapshot(t, extKey(1, `{"gpu_name":"G","gpu_total_bytes":1073741824,"tags":{"k":"v"}}`,
		[]any{0, "set_fraction", 900_000, 0, half, 0, "text", ""},
		[]any{2, "marker", 1_001_500, 0, 0, 0, "agent", "a1"},
		[]any{4, "empty_cache", 1_003_000, 0, 0, 0, "text", ""},
	))
	s, err := Load(bytes.NewReader(data), "x.pickle", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var w eventWriter
	w.s, w.collect = s, true
	if err := s.each(&w); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range w.out {
		kinds = append(kinds, e.Kind.String())
	}
	if got := strings.Join(kinds, " "); got != "set_fraction segment_alloc alloc marker free_requested free_completed empty_cache" {
		t.Errorf("events %s", got)
	}
	if ev := w.out[0].Event(); ev.Aux != half || ev.TimeNS != 900_000 {
		t.Errorf("set_fraction %+v", ev)
	}
	h := s.Header()
	if h.GPUName != "G" || h.GPUTotalBytes != 1<<30 || h.Tags["k"] != "v" || h.Producer != trace.ProducerPyTorch {
		t.Errorf("header %+v", h)
	}
}

// A bad "fragsim" key is an error naming it: it is read as any input is.
func TestExtensionRefused(t *testing.T) {
	for _, tc := range []struct {
		ext  func(*pickle.Encoder)
		want string
	}{
		{extKey(2, ""), "version 2"},
		{extKey(1, "{"), "header"},
		{extKey(1, `{"gpu_total_bytes":18446744073709551615}`), "gpu_total_bytes"},
		{extKey(1, "", []any{5, "empty_cache", 1, 0, 0, 0, "text", ""}), "event 0: place 5"},
		{extKey(1, "", []any{2, "empty_cache", 1, 0, 0, 0, "text", ""}, []any{1, "empty_cache", 1, 0, 0, 0, "text", ""}), "event 1: place 1"},
		{extKey(1, "", []any{0, "alloc", 1, 0, 0, 0, "text", ""}), `kind "alloc"`},
		{extKey(1, "", []any{0, "marker", 1, 0, 0, 0, "nonsense", ""}), "marker kind"},
		{extKey(1, "", []any{0, "set_fraction", 1, 0, math.Float64bits(2), 0, "text", ""}), "fraction 2"},
		{extKey(1, "", []any{0, "device_mem", 1, 0, 10, 20, "text", ""}), "free of 10 total"},
		{extKey(1, "", []any{0, "empty_cache", -1, 0, 0, 0, "text", ""}), "fields"},
		{extKey(1, "", []any{0, "empty_cache"}), "2 fields"},
	} {
		_, err := Load(bytes.NewReader(extSnapshot(t, tc.ext)), "x.pickle", Options{})
		if err == nil || !strings.Contains(err.Error(), "x.pickle: snapshot key \"fragsim\"") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err %v, want one naming the key and %q", err, tc.want)
		}
	}
}
