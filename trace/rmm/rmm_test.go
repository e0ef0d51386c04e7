package rmm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

func TestImport(t *testing.T) {
	f, err := os.Open("testdata/log.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf eventBuffer
	sum, err := Import(f, "log.csv", &buf)
	if err != nil {
		t.Fatal(err)
	}
	const day = 86400 * int64(1e9)
	ms := int64(1e6)
	want := []trace.Event{
		{Kind: trace.KindAlloc, TimeNS: day - ms, Addr: 0x7f8a40000000, SizeBytes: 1024},
		{Kind: trace.KindAlloc, TimeNS: day - ms/2, Addr: 0x7f8a40000400, SizeBytes: 2048, Stream: 0x7f8a38001020},
		{Kind: trace.KindFreeRequested, TimeNS: day + 100_000, Addr: 0x7f8a40000000, SizeBytes: 1024},
		{Kind: trace.KindFreeCompleted, TimeNS: day + 100_000, Addr: 0x7f8a40000000, SizeBytes: 1024},
		{Kind: trace.KindOOM, TimeNS: day + 200_000, SizeBytes: 100 << 30, Stream: 0x7f8a38001020},
		{Kind: trace.KindFreeRequested, TimeNS: day + 300_000, Addr: 0x7f8a40000400, SizeBytes: 2048, Stream: 0x7f8a38001020},
		{Kind: trace.KindFreeCompleted, TimeNS: day + 300_000, Addr: 0x7f8a40000400, SizeBytes: 2048, Stream: 0x7f8a38001020},
	}
	if !reflect.DeepEqual(buf.events, want) {
		t.Fatalf("events\n%+v\nwant\n%+v", buf.events, want)
	}
	if sum.Events != 7 || sum.Actions["free"] != 2 || sum.Actions["allocate failure"] != 1 || sum.Threads != 2 || len(sum.Streams) != 2 {
		t.Errorf("summary %+v", sum)
	}
}

func TestEpochTimeAndDeallocate(t *testing.T) {
	in := "Thread,Time,Action,Pointer,Size,Stream\n1,1634567890.123456,allocate,0x10,5,0x0\n1,1634567890.5,deallocate,0x10,5,0x0\n"
	var buf eventBuffer
	if _, err := Import(strings.NewReader(in), "x", &buf); err != nil {
		t.Fatal(err)
	}
	if len(buf.events) != 3 || buf.events[0].TimeNS != 1634567890123456000 || buf.events[2].TimeNS != 1634567890500000000 {
		t.Errorf("events %+v", buf.events)
	}
}

func TestBadLines(t *testing.T) {
	cases := map[string]int{
		"Thread,Time\n": 1,
		"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:01.0,allocate,0x1,5\n":                                  2,
		"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:01.0,allocate,0x1,5,0x0\n1,xx,free,0x1,5,0x0\n":         3,
		"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:01.0,allocate,0x1,5,0x0\n1,00:00:01.0,grow,0x1,5,0x0\n": 3,
		"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:01.0,allocate,zz,5,0x0\n":                               2,
		"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:01.0,allocate,0x1,-5,0x0\n":                             2,
		"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:01.0,allocate,0x1,18446744073709551615,0x0\n":           2,
		"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:01.0,allocate,0x1,281474976710657,0x0\n":                2,
	}
	for in, line := range cases {
		var buf eventBuffer
		_, err := Import(strings.NewReader(in), "x.csv", &buf)
		var le *LineError
		if !errors.As(err, &le) || le.Line != line || !strings.HasPrefix(err.Error(), "x.csv:") {
			t.Errorf("%q: err %v, want line %d", in, err, line)
		}
	}
}

func TestImportFileKeepsValidPrefix(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "cut.csv")
	os.WriteFile(in, []byte("Thread,Time,Action,Pointer,Size,Stream\n1,00:00:01.0,allocate,0x1,5,0x0\n1,00:00:0"), 0o644)
	out := filepath.Join(dir, "cut.fst")
	sum, err := ImportFile(in, out)
	var le *LineError
	if !errors.As(err, &le) || le.Line != 3 {
		t.Fatalf("err %v", err)
	}
	h, evs, rerr := func() (*trace.Header, []trace.Event, error) {
		f, err := os.Open(out)
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		return trace.ReadAll(f)
	}()
	if rerr != nil || len(evs) != 1 || sum.Events != 1 || h.Producer != trace.ProducerRMM {
		t.Fatalf("kept %d events (%v), header %+v", len(evs), rerr, h)
	}
	if !strings.Contains(strings.Join(h.Approximate, " "), "cut at a bad line") {
		t.Errorf("header does not say the log was cut: %v", h.Approximate)
	}
	// Nothing valid: nothing written.
	os.WriteFile(in, []byte("nope\n"), 0o644)
	os.Remove(out)
	if _, err := ImportFile(in, out); err == nil {
		t.Fatal("no error")
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("wrote a trace from a file with no valid line")
	}
}

// TestImportFileStreamsSameBytes checks that a log file, read twice (the
// first pass finds where it is cut, the second writes the events), gives
// the trace a pipe gives, whose events are kept in memory: cut or not.
func TestImportFileStreamsSameBytes(t *testing.T) {
	dir := t.TempDir()
	var log strings.Builder
	log.WriteString("Thread,Time,Action,Pointer,Size,Stream\n")
	for i := range 3000 {
		fmt.Fprintf(&log, "1,00:00:%02d.%06d,allocate,0x%x,%d,0x0\n", i/1000, i%1000*100, 0x1000+i*512, 512)
		fmt.Fprintf(&log, "1,00:00:%02d.%06d,free,0x%x,%d,0x0\n", i/1000, i%1000*100+50, 0x1000+i*512, 512)
	}
	for _, tail := range []string{"", "1,00:00:09.0,grow,0x1,5,0x0\n"} {
		in := filepath.Join(dir, "log.csv")
		if err := os.WriteFile(in, []byte(log.String()+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "file.fst")
		sum, err := ImportFile(in, file)
		if (err != nil) != (tail != "") || sum.Events != 9000 {
			t.Fatalf("tail %q: %d events, %v", tail, sum.Events, err)
		}
		fifo := filepath.Join(dir, "fifo")
		os.Remove(fifo)
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Skipf("no fifo: %v", err)
		}
		go func() {
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err == nil {
				f.WriteString(log.String() + tail)
				f.Close()
			}
		}()
		piped := filepath.Join(dir, "pipe.fst")
		if _, err := ImportFile(fifo, piped); (err != nil) != (tail != "") {
			t.Fatalf("tail %q, from a pipe: %v", tail, err)
		}
		read := func(path string) (*trace.Header, []trace.Event) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			h, evs, err := trace.ReadAll(f)
			if err != nil {
				t.Fatal(err)
			}
			return h, evs
		}
		ha, a := read(file)
		hb, b := read(piped)
		// The header's note on the cut names the input.
		na := strings.Join(ha.Approximate, "|")
		nb := strings.ReplaceAll(strings.Join(hb.Approximate, "|"), fifo, in)
		if len(a) != 9000 || !reflect.DeepEqual(a, b) || na != nb {
			t.Fatalf("tail %q: the file gave %d events (%s), the pipe %d (%s)", tail, len(a), na, len(b), nb)
		}
	}
}

// The times of an imported log never go back: a wrap past midnight adds a
// day (and says where), a line a little behind the one before (threads)
// takes its time, and a clock that jumps back is refused at its line.
func TestClockMonotonic(t *testing.T) {
	const head = "Thread,Time,Action,Pointer,Size,Stream\n"
	s := int64(1e9)
	for _, tc := range []struct {
		name, log string
		times     []int64 // of the events, when imported
		errLine   int     // the line refused, or 0
		note      string  // in Summary.Clock
	}{
		{name: "wrap", log: "1,23:30:00,allocate,0x10,5,0x0\n1,23:59:59,allocate,0x20,5,0x0\n1,00:29:59,free,0x10,5,0x0\n",
			times: []int64{84600 * s, 86399 * s, 88199 * s, 88199 * s}, note: "passed midnight at line 4"},
		{name: "skew across midnight", log: "1,23:59:59.9,allocate,0x10,5,0x0\n2,00:00:00.1,allocate,0x20,5,0x0\n1,23:59:59.95,free,0x10,5,0x0\n",
			times: []int64{86399*s + 9e8, 86400*s + 1e8, 86400*s + 1e8, 86400*s + 1e8}, note: "1 lines (the first at line 4) were up to 0.150000 s behind"},
		{name: "back an hour", log: "1,01:00:00,allocate,0x10,5,0x0\n1,00:00:00,free,0x10,5,0x0\n", errLine: 3},
		{name: "epoch back", log: "1,1634567890.5,allocate,0x10,5,0x0\n1,1634567880.5,free,0x10,5,0x0\n", errLine: 3},
		{name: "epoch skew", log: "1,1634567890.5,allocate,0x10,5,0x0\n1,1634567890.25,free,0x10,5,0x0\n",
			times: []int64{1634567890500000000, 1634567890500000000, 1634567890500000000}, note: "up to 0.250000 s behind"},
	} {
		var buf eventBuffer
		sum, err := Import(strings.NewReader(head+tc.log), "c.csv", &buf)
		var le *LineError
		if tc.errLine != 0 {
			if !errors.As(err, &le) || le.Line != tc.errLine || !strings.Contains(err.Error(), "not monotonic") {
				t.Errorf("%s: err %v, want one at line %d", tc.name, err, tc.errLine)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []int64
		for _, e := range buf.events {
			got = append(got, e.TimeNS)
		}
		if !reflect.DeepEqual(got, tc.times) || !strings.Contains(strings.Join(sum.Clock, "; "), tc.note) || sum.LastNS < sum.FirstNS {
			t.Errorf("%s: times %v, clock %q; want %v and %q", tc.name, got, sum.Clock, tc.times, tc.note)
		}
	}
}

// eventBuffer is a Sink that keeps events in memory.
type eventBuffer struct {
	events []trace.Event
}

func (b *eventBuffer) WriteEvent(e trace.Event) error {
	b.events = append(b.events, e)
	return nil
}
func (b *eventBuffer) String(string) trace.StringID      { return trace.NoString }
func (b *eventBuffer) Stack([]trace.Frame) trace.StackID { return trace.NoStack }
