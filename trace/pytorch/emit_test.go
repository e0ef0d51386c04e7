package pytorch

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// eventOnly is a trace.RangeSink that gives a trace.Writer every event
// one at a time (RangeSink's reference: the same bytes).
type eventOnly struct{ w *trace.Writer }

func (s eventOnly) WriteEvent(e trace.Event) error      { return s.w.WriteEvent(e) }
func (s eventOnly) String(x string) trace.StringID      { return s.w.String(x) }
func (s eventOnly) Stack(f []trace.Frame) trace.StackID { return s.w.Stack(f) }
func (s eventOnly) Flush() error                        { return s.w.Flush() }

func (s eventOnly) WriteEvents(evs []trace.Event) error {
	for _, e := range evs {
		if err := s.w.WriteEvent(e); err != nil {
			return err
		}
	}
	return nil
}

func (s eventOnly) WriteRange(n int, fill func(dst []trace.Event, i int)) error {
	one := make([]trace.Event, 1)
	for i := range n {
		fill(one, i)
		if err := s.w.WriteEvent(one[0]); err != nil {
			return err
		}
	}
	return nil
}

func (s eventOnly) WriteRangeEnd(n int, fill func(dst []trace.Event, i int)) error {
	if err := s.WriteRange(n, fill); err != nil {
		return err
	}
	return s.w.Flush()
}

// TestEmitBatchedSameBytes checks that Emit, which gives a trace.Writer
// the plain events in batches and ranges, runs between the events it
// merges in (inferred empty_cache() calls, annotations), writes the bytes
// it writes one event at a time, merging with each entry: on every test
// snapshot, with the import's writer options and with small chunks
// compressed on 3 goroutines (of the real snapshots, in the everyday pass,
// those with events merged in and with stacks; all with FRAGSIM_LONG=1).
// Some snapshots must have events merged in.
func TestEmitBatchedSameBytes(t *testing.T) {
	merged := 0
	for name, data := range testSnapshots(t) {
		s, err := LoadPickle(data, Options{})
		if s == nil {
			continue // a test of errors
		}
		_ = err
		if name == "testdata/real/empty_cache.pickle.gz" {
			addMarkers(s)
		}
		for _, q := range s.seqs {
			if q.ecTo > q.ecFrom || len(q.markers) > 0 {
				merged++
			}
		}
		allOpts := [][]trace.WriterOption{s.WriterOptions(), {trace.ChunkEvents(100), trace.Concurrency(3)}}
		if !longTests() && strings.HasSuffix(name, ".gz") && !strings.Contains(name, "empty_cache") && !strings.Contains(name, "stacks") {
			allOpts = allOpts[:1]
		}
		for _, opts := range allOpts {
			write := func(one bool) []byte {
				var buf bytes.Buffer
				w, err := trace.NewWriter(&buf, s.Header(), opts...)
				if err != nil {
					t.Fatal(err)
				}
				var sink trace.Sink = w
				mergeOneByOne = one
				defer func() { mergeOneByOne = false }()
				if one {
					sink = eventOnly{w}
				}
				if err := s.Emit(sink, nil); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				return buf.Bytes()
			}
			if want, got := write(true), write(false); !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes written in batches differ from the %d written one event at a time", name, len(got), len(want))
			}
		}
		s.Close()
	}
	if merged == 0 {
		t.Fatal("no test snapshot has empty_cache() events or annotations")
	}
}

// addMarkers adds annotations to s's first device: at the time of every
// 997th entry, and a nanosecond after every 1,499th, as the import orders
// them (by time, stable).
func addMarkers(s *Snapshot) {
	q := &s.seqs[0]
	evs := s.raw.mem[q.from:q.to]
	for j := range evs {
		for _, m := range []struct {
			every int
			after int64
		}{{997, 0}, {1499, 1}} {
			if j%m.every == 0 {
				e := event{TimeNS: evs[j].TimeNS + m.after, frames: noFrames, text: s.text(fmt.Sprint("mark ", j))}
				e.Kind, e.Marker = trace.KindMarker, trace.MarkerText
				q.markers = append(q.markers, e)
			}
		}
	}
	sort.SliceStable(q.markers, func(a, b int) bool { return q.markers[a].TimeNS < q.markers[b].TimeNS })
}

// rangeCounter counts the events Emit gives a trace.Writer one at a time
// and in ranges.
type rangeCounter struct {
	*trace.Writer
	single, ranged int
}

func (c *rangeCounter) WriteEvent(e trace.Event) error {
	c.single++
	return c.Writer.WriteEvent(e)
}

func (c *rangeCounter) WriteEvents(evs []trace.Event) error {
	c.single += len(evs)
	return c.Writer.WriteEvents(evs)
}

func (c *rangeCounter) WriteRange(n int, fill func(dst []trace.Event, i int)) error {
	c.ranged += n
	return c.Writer.WriteRange(n, fill)
}

// TestEmitTextsInRanges checks that Emit defines the annotations' texts
// and the call stacks first, so that the events with one go to the writer
// in the ranges of the events around them: none of a snapshot's events
// one at a time (with annotations added to empty_cache, and with stacks).
func TestEmitTextsInRanges(t *testing.T) {
	for _, name := range []string{"testdata/real/empty_cache.pickle.gz", "testdata/real/stacks.pickle.gz"} {
		data := testSnapshots(t)[name]
		s, err := LoadPickle(data, Options{})
		if err != nil {
			t.Fatal(err)
		}
		markers := 0
		if name == "testdata/real/empty_cache.pickle.gz" {
			addMarkers(s)
			markers = len(s.seqs[0].markers)
		}
		w, err := trace.NewWriter(io.Discard, s.Header(), s.WriterOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		c := &rangeCounter{Writer: w}
		if err := s.Emit(c, nil); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		n := s.summary.Events + markers
		stacks := len(s.stacks.stacks)
		if c.single != 0 || c.ranged < n || (markers < 100 && stacks == 0) {
			t.Errorf("%s: %d events one at a time, %d in ranges, want 0 and %d (%d annotations, %d stacks)", name, c.single, c.ranged, n, markers, stacks)
		}
		s.Close()
	}
}
