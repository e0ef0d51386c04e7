// Package rmm imports RAPIDS RMM logging_resource_adaptor CSV logs into fragsim traces.
//
// A log has the header `Thread,Time,Action,Pointer,Size,Stream` and one row
// per call: `allocate` (Pointer, Size, Stream), `free` or `deallocate`, and
// `allocate failure` (newer RMM: Size could not be allocated). Time is either
// spdlog's `HH:MM:SS.ffffff` (wall clock of the day; a wrap past midnight is
// followed) or seconds since the epoch. Rows become KindAlloc, a
// KindFreeRequested plus KindFreeCompleted pair, and KindOOM events on device
// 0; RMM logs hold no device-level (segment) events.
//
// The times of a trace never go back. A time of day that falls by more than
// half a day is the clock passing midnight: a day is added from there on
// (Summary.Clock says at which lines). Threads log side by side, so a line
// may come a little before the line above it: up to MaxClockSkewNS, its time
// is raised to that line's (counted in Summary.Clock); further back, the
// line is an error naming it.
package rmm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/trace"
)

// Summary describes an import.
type Summary struct {
	Input   string           `json:"input"`
	Output  string           `json:"output,omitempty"`
	Lines   int              `json:"lines"`
	Events  int              `json:"events"`
	Kinds   map[string]int   `json:"kinds"`
	Actions map[string]int   `json:"actions"`
	Streams []trace.StreamID `json:"streams"`
	FirstNS int64            `json:"first_ns"`
	LastNS  int64            `json:"last_ns"`
	Threads int              `json:"threads"`
	// Clock says how the log's times were made monotonic: the midnights
	// passed, and the lines whose time was raised to the line before
	// theirs (see the package documentation); empty when the times never
	// went back.
	Clock []string `json:"clock,omitempty"`
}

// MaxClockSkewNS is how far a line's time may be behind the line before
// it (threads logging side by side) before the line is refused: 1 s.
const MaxClockSkewNS = int64(1e9)

// clock makes a log's times monotonic (see the package documentation).
type clock struct {
	name      string
	started   bool
	last      int64 // the last time given (unwrapped)
	dayOffset int64
	raised    int   // lines whose time was raised
	maxRaise  int64 // by at most this
	firstLine int   // the first line raised
	midnights []int // the lines where the clock passed midnight
}

// next returns the time of the line at lineNo whose raw time is raw (of
// the day when ofDay).
func (c *clock) next(raw int64, ofDay bool, lineNo int) (int64, error) {
	t := raw + c.dayOffset
	if !c.started {
		c.started, c.last = true, t
		return t, nil
	}
	if ofDay {
		switch {
		case t+dayNS/2 < c.last: // past midnight
			c.dayOffset += dayNS
			t += dayNS
			c.midnights = append(c.midnights, lineNo)
		case t-dayNS/2 > c.last && c.dayOffset > 0: // a line from before the last midnight
			t -= dayNS
		}
	}
	if t < c.last {
		back := c.last - t
		if back > MaxClockSkewNS {
			return 0, &LineError{c.name, lineNo, fmt.Sprintf("the time goes back %.6f s from the line before (more than the %.0f s threads may skew, and not a wrap past midnight): the clock is not monotonic",
				float64(back)/1e9, float64(MaxClockSkewNS)/1e9)}
		}
		if c.raised == 0 {
			c.firstLine = lineNo
		}
		c.raised++
		c.maxRaise = max(c.maxRaise, back)
		t = c.last
	}
	c.last = t
	return t, nil
}

// notes says what next did to the times.
func (c *clock) notes() []string {
	var out []string
	for _, l := range c.midnights {
		out = append(out, fmt.Sprintf("the clock passed midnight at line %d: a day was added to the times from there", l))
	}
	if c.raised > 0 {
		out = append(out, fmt.Sprintf("%d lines (the first at line %d) were up to %.6f s behind the line before (threads logging side by side): their times were raised to it",
			c.raised, c.firstLine, float64(c.maxRaise)/1e9))
	}
	return out
}

// LineError is an error at a line of the log.
type LineError struct {
	Name string
	Line int
	Msg  string
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Msg) }

// sameLineError reports whether a and b are the same *LineError: the
// same bad line, for the same reason.
func sameLineError(a, b error) bool {
	var la, lb *LineError
	return errors.As(a, &la) && errors.As(b, &lb) && *la == *lb
}

// ErrNotRMM is matched by the error for input without the RMM CSV header.
var ErrNotRMM = errors.New("not an RMM log: the first line is not Thread,Time,Action,Pointer,Size,Stream")

// Header returns the trace header of an imported RMM log.
func Header() *trace.Header {
	return &trace.Header{
		Producer: trace.ProducerRMM,
		Approximate: []string{
			"RMM logs hold no device-level events (no segment_alloc/segment_free) and no device ordinal: every event is on device 0",
			"RMM frees are complete when logged: each is a free_requested directly followed by its free_completed",
		},
	}
}

const dayNS = 24 * 3600 * int64(1e9)

// MaxSizeBytes is the largest size a row may have (2^48 bytes, 256 TiB):
// a larger one is a bad line, not a request a replay could place.
const MaxSizeBytes = 1 << 48

// parseTime reads HH:MM:SS.ffffff (nanoseconds of the day) or epoch seconds.
func parseTime(s string) (ns int64, ofDay bool, err error) {
	if strings.Count(s, ":") == 2 {
		parts := strings.SplitN(s, ":", 3)
		h, err1 := strconv.Atoi(parts[0])
		m, err2 := strconv.Atoi(parts[1])
		sec, err3 := strconv.ParseFloat(parts[2], 64)
		if err1 != nil || err2 != nil || err3 != nil || h < 0 || h > 23 || m < 0 || m > 59 || sec < 0 || sec >= 61 {
			return 0, false, fmt.Errorf("bad time %q (want HH:MM:SS.ffffff)", s)
		}
		// Keep microsecond digits exact.
		whole, frac, _ := strings.Cut(parts[2], ".")
		ws, _ := strconv.Atoi(whole)
		var fracNS int64
		if frac != "" {
			f := (frac + "000000000")[:9]
			fracNS, _ = strconv.ParseInt(f, 10, 64)
		}
		return (int64(h)*3600+int64(m)*60+int64(ws))*1e9 + fracNS, true, nil
	}
	whole, frac, _ := strings.Cut(s, ".")
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w < 0 || w > 1<<33 {
		return 0, false, fmt.Errorf("bad time %q (want HH:MM:SS.ffffff or epoch seconds)", s)
	}
	var fracNS int64
	if frac != "" {
		if _, err := strconv.ParseUint(frac, 10, 64); err != nil {
			return 0, false, fmt.Errorf("bad time %q", s)
		}
		fracNS, _ = strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	}
	return w*1e9 + fracNS, false, nil
}

func parsePtr(s string) (uint64, error) {
	switch s {
	case "", "(nil)", "nullptr", "0", "nil":
		return 0, nil
	}
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		return strconv.ParseUint(h, 16, 64)
	}
	return strconv.ParseUint(s, 10, 64)
}

// Import reads an RMM CSV log from r and writes its events to sink. On a
// bad line it returns the summary of the events already written and a
// *LineError naming the line.
func Import(r io.Reader, name string, sink trace.Sink) (*Summary, error) {
	sum := &Summary{Input: name, Kinds: map[string]int{}, Actions: map[string]int{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	streams := map[trace.StreamID]bool{}
	threads := map[string]bool{}
	clk := &clock{name: name}
	write := func(e trace.Event) error {
		if err := sink.WriteEvent(e); err != nil {
			return err
		}
		sum.Events++
		sum.Kinds[e.Kind.String()]++
		if sum.Events == 1 || e.TimeNS < sum.FirstNS {
			sum.FirstNS = e.TimeNS
		}
		sum.LastNS = max(sum.LastNS, e.TimeNS)
		return nil
	}
	defer func() {
		for s := range streams {
			sum.Streams = append(sum.Streams, s)
		}
		sortStreams(sum.Streams)
		sum.Threads = len(threads)
		sum.Clock = clk.notes()
	}()
	for sc.Scan() {
		sum.Lines++
		line := strings.TrimRight(sc.Text(), "\r")
		if sum.Lines == 1 {
			if strings.ReplaceAll(strings.TrimPrefix(line, "\ufeff"), " ", "") != "Thread,Time,Action,Pointer,Size,Stream" {
				return sum, &LineError{name, 1, ErrNotRMM.Error()}
			}
			continue
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 6 {
			return sum, &LineError{name, sum.Lines, fmt.Sprintf("%d fields, want 6 (Thread,Time,Action,Pointer,Size,Stream)", len(f))}
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		raw, ofDay, err := parseTime(f[1])
		if err != nil {
			return sum, &LineError{name, sum.Lines, err.Error()}
		}
		t, err := clk.next(raw, ofDay, sum.Lines)
		if err != nil {
			return sum, err
		}
		ptr, err := parsePtr(f[3])
		if err != nil {
			return sum, &LineError{name, sum.Lines, fmt.Sprintf("bad pointer %q", f[3])}
		}
		size, err := strconv.ParseUint(f[4], 10, 64)
		if err != nil {
			return sum, &LineError{name, sum.Lines, fmt.Sprintf("bad size %q", f[4])}
		}
		if size > MaxSizeBytes {
			return sum, &LineError{name, sum.Lines, fmt.Sprintf("size %d is above %d bytes (2^48), more than any device holds", size, uint64(MaxSizeBytes))}
		}
		stream, err := parsePtr(f[5])
		if err != nil {
			return sum, &LineError{name, sum.Lines, fmt.Sprintf("bad stream %q", f[5])}
		}
		threads[f[0]] = true
		e := trace.Event{TimeNS: t, Addr: ptr, SizeBytes: size, Stream: trace.StreamID(stream)}
		action := strings.ToLower(f[2])
		switch action {
		case "allocate":
			e.Kind = trace.KindAlloc
			err = write(e)
		case "free", "deallocate":
			e.Kind = trace.KindFreeRequested
			if err = write(e); err == nil {
				e.Kind = trace.KindFreeCompleted
				err = write(e)
			}
		case "allocate failure", "allocate_failure", "failure":
			e.Kind = trace.KindOOM
			e.Addr = 0
			err = write(e)
		default:
			return sum, &LineError{name, sum.Lines, fmt.Sprintf("unknown action %q (want allocate, free or allocate failure)", f[2])}
		}
		if err != nil {
			return sum, &LineError{name, sum.Lines, err.Error()}
		}
		sum.Actions[action]++
		streams[e.Stream] = true
	}
	if err := sc.Err(); err != nil {
		return sum, &LineError{name, sum.Lines + 1, err.Error()}
	}
	if sum.Lines == 0 {
		return sum, &LineError{name, 1, "empty file: " + ErrNotRMM.Error()}
	}
	return sum, nil
}

func sortStreams(s []trace.StreamID) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// ImportFile imports the log file in into the trace file out. When a line
// is bad, the events before it are kept in out (the header says where the
// log was cut) and the error names the line; when none were valid, nothing
// is written.
//
// The log is read twice, once to find whether and where it is cut (the
// header says so, and it comes first), once to write the events, so that
// neither the log nor its events are held in memory. A log that can be
// read only once (standard input, a pipe) is copied to a temporary file
// first (trace.OpenInput, beside out).
//
// in "-" is standard input.
func ImportFile(in, out string) (*Summary, error) {
	f, err := trace.OpenInput(in, trace.InputOptions{Dir: outfile.Dir(out)})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sum, ierr := Import(f, in, discard{})
	if ierr != nil && sum.Events == 0 {
		return sum, ierr
	}
	h := Header()
	if ierr != nil {
		h.Approximate = append(h.Approximate, "the log was cut at a bad line: "+ierr.Error()+"; only the events before it are kept")
	}
	// The trace goes to a temporary file of its own beside out, renamed
	// over it once whole (see package outfile).
	of, err := outfile.Create(out, in)
	if err != nil {
		return sum, err
	}
	defer of.Abort()
	w, err := trace.NewWriter(of, h)
	if err != nil {
		return sum, err
	}
	if _, err = f.Seek(0, io.SeekStart); err == nil {
		// The second pass stops at the same bad line, with the same events
		// written before it.
		var again *Summary
		again, err = Import(f, in, w)
		if sameLineError(err, ierr) {
			err = nil
		}
		if err == nil && again.Events != sum.Events {
			err = fmt.Errorf("%s changed while it was imported", in)
		}
	}
	if err != nil {
		w.Close()
		return sum, err
	}
	if err := w.Close(); err != nil {
		return sum, err
	}
	if err := of.Commit(); err != nil {
		return sum, err
	}
	sum.Output = out
	return sum, ierr
}

// discard is a Sink that keeps nothing.
type discard struct{}

func (discard) WriteEvent(trace.Event) error      { return nil }
func (discard) String(string) trace.StringID      { return trace.NoString }
func (discard) Stack([]trace.Frame) trace.StackID { return trace.NoStack }
