package pytorch

import (
	"fmt"
	"testing"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// TestRealStackedSnapshot imports snapshots PyTorch 2.11 wrote on an H200
// with Python stacks on every entry (traces/workloads/stacks.py, and
// multi_agent.py --context all: 25,234 entries of BERT inference, 21-26
// frames deep), whose frame dicts and lists are shared between entries
// through the memo, and checks every event's stack against the entry's
// frames as pickle.Decode reads them: decoded on one goroutine, and on
// workers in small chunks.
func TestRealStackedSnapshot(t *testing.T) {
	// (The workers leave an entry whose frames list holds a frame dict
	// not met before to the decoder, and go on from the next: started
	// after 100 entries, during the first forward passes, they decode
	// 25,045 of stacks_agents' entries; 918 when they left the rest of
	// the chunk too.)
	for _, tc := range []struct {
		file    string
		entries int
	}{{"stacks.pickle.gz", 783}, {"stacks_agents.pickle.gz", 25234}} {
		if tc.file != "stacks.pickle.gz" && !longTests() {
			continue // long: set FRAGSIM_LONG=1
		}
		data := gunzip(t, "testdata/real/"+tc.file)
		for _, opt := range []Options{{Workers: 1}, {Workers: 4, tune: &pickle.ParallelTuning{After: 100, ChunkBytes: 16 << 10}}} {
			t.Run(fmt.Sprintf("%s/workers=%d", tc.file, opt.Workers), func(t *testing.T) {
				checkStacks(t, data, opt, tc.entries)
			})
		}
	}
}

// checkStacks checks the stack of every event data imports to with opt
// against its entry's frames.
func checkStacks(t *testing.T, data []byte, opt Options, n int) {
	v, err := pickle.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	dv, _ := v.(*pickle.Dict).Get("device_traces")
	entries := dv.(*pickle.List).Items[0].(*pickle.List).Items
	var want []string
	for _, e := range entries {
		fv, _ := e.(*pickle.Dict).Get("frames")
		s := ""
		for _, f := range fv.(*pickle.List).Items {
			fd := f.(*pickle.Dict)
			name, _ := getString(fd, "name")
			file, _ := getString(fd, "filename")
			line, _ := getInt(fd, "line")
			s += fmt.Sprintf("%s@%s:%d;", name, file, line)
		}
		want = append(want, s)
	}

	s, err := LoadPickle(data, opt)
	if err != nil {
		t.Fatal(err)
	}
	if opt.Workers > 1 && s.par.Entries < int64(n-int(opt.tune.After))*9/10 {
		t.Errorf("the workers decoded %d of %d entries (%+v)", s.par.Entries, n, s.par)
	}
	var got []string
	sink := &stackSink{}
	if err := s.Emit(sink, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range sink.events {
		if e.Kind == trace.KindEmptyCache {
			continue
		}
		str := ""
		for _, f := range sink.stacks[e.Stack] {
			str += fmt.Sprintf("%s@%s:%d;", sink.strs[f.Func], sink.strs[f.File], f.Line)
		}
		got = append(got, str)
	}
	if len(got) != n || len(got) != len(want) || s.Summary().Stacks != n {
		t.Fatalf("%d events (%d with stacks), %d entries", len(got), s.Summary().Stacks, len(want))
	}
	for i := range want {
		if got[i] != want[i] || want[i] == "" {
			t.Fatalf("event %d: stack %q, entry's frames %q", i, got[i], want[i])
		}
	}
}

// stackSink is a trace.Sink that keeps the events, strings and stacks.
type stackSink struct {
	events []trace.Event
	strs   []string
	stacks [][]trace.Frame
}

func (s *stackSink) WriteEvent(e trace.Event) error { s.events = append(s.events, e); return nil }

func (s *stackSink) String(str string) trace.StringID {
	if len(s.strs) == 0 {
		s.strs = append(s.strs, "")
	}
	s.strs = append(s.strs, str)
	return trace.StringID(len(s.strs) - 1)
}

func (s *stackSink) Stack(frames []trace.Frame) trace.StackID {
	if len(s.stacks) == 0 {
		s.stacks = append(s.stacks, nil)
	}
	s.stacks = append(s.stacks, append([]trace.Frame(nil), frames...))
	return trace.StackID(len(s.stacks) - 1)
}
