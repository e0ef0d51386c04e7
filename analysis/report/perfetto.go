package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/trace"
)

// perfettoEvent is one Chrome trace event.
type perfettoEvent struct {
	Name  string         `json:"name"`
	Phase string         `json:"ph"`
	TS    float64        `json:"ts"` // microseconds since the trace's first event
	PID   int            `json:"pid"`
	TID   int            `json:"tid"`
	Scope string         `json:"s,omitempty"`
	Args  map[string]any `json:"args,omitempty"`
}

// WritePerfetto replays the trace under each policy and writes Chrome
// trace-event JSON (Perfetto, chrome://tracing): one process per policy,
// each with counter tracks of reserved, active and requested bytes
// (downsampled with every bucket's minimum and maximum kept), and instant
// events for its OOMs and for the trace's empty_cache calls.
func WritePerfetto(w io.Writer, open analysis.Opener, opts ExportOptions) error {
	cmp, err := analysis.Compare(open, analysis.CompareOptions{Policies: opts.Policies, Conf: opts.Conf,
		Config: opts.Config, Settings: []analysis.Setting{}, Name: opts.Name, MaxPoints: 2 * DefaultBuckets,
		Progress: opts.Progress})
	if err != nil {
		return err
	}
	t0, empties, err := emptyCaches(open)
	if err != nil && !errors.Is(err, trace.ErrTruncated) {
		return err
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	io.WriteString(bw, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")
	first := true
	put := func(ev perfettoEvent) {
		if !first {
			io.WriteString(bw, ",")
		}
		first = false
		enc.Encode(ev)
	}
	for i, r := range cmp.Runs {
		if !r.OK() {
			continue
		}
		pid := i + 1
		put(perfettoEvent{Name: "process_name", Phase: "M", PID: pid, Args: map[string]any{"name": r.Label}})
		put(perfettoEvent{Name: "process_sort_index", Phase: "M", PID: pid, Args: map[string]any{"sort_index": i}})
		res, act, req := r.SeriesNamed("reserved"), r.SeriesNamed("active"), r.SeriesNamed("requested")
		if res == nil || act == nil || req == nil {
			continue
		}
		// The series share their events only bucket by bucket: each is
		// written as its own counter.
		for _, s := range []*analysis.Series{res, act, req} {
			for k := range s.TimeS {
				put(perfettoEvent{Name: s.Name + " bytes", Phase: "C", TS: s.TimeS[k] * 1e6, PID: pid,
					Args: map[string]any{s.Name: int64(s.Value[k]*(1<<30) + 0.5)}})
			}
		}
		for _, o := range r.Result.OOMEvents {
			put(perfettoEvent{Name: "OOM", Phase: "i", Scope: "p", TS: float64(o.TimeNS-t0) / 1e3, PID: pid,
				Args: map[string]any{"event": o.Index, "size": o.SizeBytes, "reserved": o.ReservedBytes,
					"stranded": o.StrandedBytes, "fragmentation": o.Fragmentation}})
		}
		for _, e := range empties {
			put(perfettoEvent{Name: "empty_cache", Phase: "i", Scope: "p", TS: float64(e.timeNS-t0) / 1e3, PID: pid,
				Args: map[string]any{"event": e.index}})
		}
	}
	io.WriteString(bw, "]}\n")
	return bw.Flush()
}

type traceMoment struct {
	index  int64
	timeNS int64
}

// emptyCaches reads the trace for its first event's time and its
// empty_cache calls.
func emptyCaches(open analysis.Opener) (t0 int64, out []traceMoment, err error) {
	r, c, err := open()
	if err != nil {
		return 0, nil, err
	}
	if c != nil {
		defer c.Close()
	}
	buf := make([]trace.Event, 4096)
	var idx int64
	for {
		n, err := r.ReadEvents(buf)
		for _, ev := range buf[:n] {
			if idx == 0 {
				t0 = ev.TimeNS
			}
			if ev.Kind == trace.KindEmptyCache {
				out = append(out, traceMoment{idx, ev.TimeNS})
			}
			idx++
		}
		if err == io.EOF {
			return t0, out, nil
		}
		if err != nil {
			return t0, out, err
		}
	}
}
