package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// A device log is a side file of device-memory samples taken beside a
// run whose trace does not hold them (a snapshot): one sample a line,
//
//	time_ns device free_bytes total_bytes
//
// four whitespace-separated decimal integers: the sample's time in
// nanoseconds on the trace's clock (since the Unix epoch, as
// time.time_ns() gives), the device index, and torch.cuda.mem_get_info()'s
// free and total bytes. Blank lines and lines starting with '#' are
// skipped. The file may be gzip'd. Each sample becomes a device_mem event
// (SizeBytes the free bytes, Aux the total).

// maxDeviceLogLine bounds a device log's line: four integers need far less.
const maxDeviceLogLine = 4096

// MaxDeviceSamples is the most samples a device log may hold (2^22, 256
// MiB of events: eleven hours at one sample every 10 ms). The count is
// checked before a sample is added, so that a log of more is refused
// before it fills memory.
const MaxDeviceSamples = 1 << 22

// The budget of a gzip'd device log: it may decompress to at most
// deviceLogRatio times the compressed bytes read so far, beyond a floor
// of deviceLogFloor bytes. A real log (lines of four numbers) compresses
// 3 to 10 times; a log of one repeated line far more, and is refused as a
// decompression bomb once past the budget, while it is read.
const deviceLogRatio = 100

// deviceLogFloor is what any gzip'd device log may decompress to (a
// variable for tests).
var deviceLogFloor int64 = 16 << 20

// maxDeviceSamples is MaxDeviceSamples (a variable for tests).
var maxDeviceSamples = MaxDeviceSamples

// ReadDeviceLog parses a device log from r; name labels its errors. The
// samples come back sorted by time (stable: equal times keep the file's
// order). A line that is not four integers, a negative or non-integer
// value, a value past int64 (time) or 2^48 (bytes), a device index past
// int32, a total of 0, or free bytes above the total is refused with an
// error naming the line; so is a log of more than MaxDeviceSamples
// samples, or a gzip'd one that decompresses past its budget.
func ReadDeviceLog(r io.Reader, name string) ([]Event, error) {
	in := &countingReader{r: r}
	br := bufio.NewReader(in)
	var z *budgetReader
	if head, err := br.Peek(2); err == nil && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		z = &budgetReader{r: zr, in: in}
		br = bufio.NewReader(z)
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 256), maxDeviceLogLine)
	var evs []Event
	line := 0
	for sc.Scan() {
		line++
		s := bytes.TrimSpace(sc.Bytes())
		if len(s) == 0 || s[0] == '#' {
			continue
		}
		ev, err := parseDeviceSample(string(s))
		if err != nil {
			if z != nil && z.err != nil { // the line was cut by the budget
				return nil, fmt.Errorf("%s: after line %d: %w", name, line-1, z.err)
			}
			return nil, fmt.Errorf("%s: line %d: %w", name, line, err)
		}
		if len(evs) == maxDeviceSamples {
			return nil, fmt.Errorf("%s: line %d: more than %d samples, the most a device log may hold: sample less often", name, line, maxDeviceSamples)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, fmt.Errorf("%s: line %d: longer than %d bytes: not a device log", name, line+1, maxDeviceLogLine)
		}
		return nil, fmt.Errorf("%s: after line %d: %w", name, line, err)
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].TimeNS < evs[j].TimeNS })
	return evs, nil
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// budgetReader fails a decompression r that gives more than its budget
// for the compressed bytes in has read.
type budgetReader struct {
	r   io.Reader
	in  *countingReader
	n   int64
	err error // the budget's error, once passed
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if most := max(deviceLogRatio*b.in.n, deviceLogFloor); b.n > most {
		b.err = fmt.Errorf("gzip: decompresses to more than %d bytes from its first %d (%d times as many, at least %d MiB): refused as a decompression bomb",
			most, b.in.n, deviceLogRatio, deviceLogFloor>>20)
		return 0, b.err
	}
	return n, err
}

// ReadDeviceLogFile parses the device log at path (plain or gzip'd).
func ReadDeviceLogFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadDeviceLog(f, path)
}

// DeviceFit says what FitDeviceSamples left out of a device log.
type DeviceFit struct {
	// Before and After count the samples before the trace's first event
	// and after its last, left out.
	Before, After int
}

// FitDeviceSamples returns the samples (sorted by time, as ReadDeviceLog
// returns them) that lie in a trace's time window, firstNS to lastNS, and
// counts those left out: a sample outside the window describes a moment
// the trace does not hold, and merged in it would stretch the trace's
// time (a sample decades early turns every time-weighted figure to 0). A
// sample naming a device the trace does not have (devices) is an error
// naming the log (name), the sample and the trace's devices: its memory
// would stand in for another device's. The samples are not changed.
func FitDeviceSamples(samples []Event, name string, devices []DeviceID, firstNS, lastNS int64) ([]Event, DeviceFit, error) {
	var fit DeviceFit
	have := make(map[DeviceID]bool, len(devices))
	for _, d := range devices {
		have[d] = true
	}
	lo := sort.Search(len(samples), func(i int) bool { return samples[i].TimeNS >= firstNS })
	hi := sort.Search(len(samples), func(i int) bool { return samples[i].TimeNS > lastNS })
	hi = max(hi, lo)
	for i := range samples {
		if d := samples[i].Device; !have[d] {
			return nil, fit, fmt.Errorf("%s: the sample at time_ns %d names device %d, which the trace does not have (its devices: %v)",
				name, samples[i].TimeNS, d, devices)
		}
	}
	fit.Before, fit.After = lo, len(samples)-hi
	return samples[lo:hi], fit, nil
}

func parseDeviceSample(s string) (Event, error) {
	f := strings.Fields(s)
	if len(f) != 4 {
		return Event{}, fmt.Errorf("%d fields, want 4: time_ns device free_bytes total_bytes", len(f))
	}
	names := [4]string{"time_ns", "device", "free_bytes", "total_bytes"}
	limits := [4]uint64{math.MaxInt64, math.MaxInt32, MaxSizeBytes, MaxSizeBytes}
	var v [4]uint64
	for i, x := range f {
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil || n > limits[i] {
			return Event{}, fmt.Errorf("%s %q: want an integer from 0 to %d", names[i], x, limits[i])
		}
		v[i] = n
	}
	if v[2] > v[3] {
		return Event{}, fmt.Errorf("free_bytes %d is above total_bytes %d", v[2], v[3])
	}
	if v[0] == 0 {
		return Event{}, fmt.Errorf("time_ns 0: want the sample's time (0 means no time in a trace)")
	}
	if v[3] == 0 {
		return Event{}, fmt.Errorf("total_bytes 0: want the device's memory, as cuMemGetInfo reports it")
	}
	return Event{Kind: KindDeviceMem, TimeNS: int64(v[0]), Device: DeviceID(v[1]), SizeBytes: v[2], Aux: v[3]}, nil
}

// MergeDeviceSamples copies r's events to w with samples (sorted by time,
// as ReadDeviceLog returns them) inserted by time: a sample goes before
// the first event with a later time, never between an event with a time
// and the untimed events (time 0) that follow it, which take its time.
// Samples after the trace's last event are left out (the count returned
// says how many were merged): nothing the trace holds happens then, and a
// replay would count the time they add in its time-weighted figures. The events of r keep their
// order. A trace that starts mid-run (its header has an initial state)
// takes its samples from before its first event just after that event, at
// that event's time: a replay measures its state after each event, and a
// sample ahead of the first would measure the initial state the first
// event changes, so the replay would differ from the trace's without
// samples. It returns how many samples were merged.
func MergeDeviceSamples(r *Reader, w *Writer, samples []Event) (int, error) {
	h := r.Header()
	for i := range samples {
		if err := h.CheckEvent(&samples[i]); err != nil {
			return 0, fmt.Errorf("device sample %d (t=%d): %w", i, samples[i].TimeNS, err)
		}
	}
	next := 0
	buf := make([]Event, 1024)
	var index int64
	var tab idRemap
	var last int64 // the time of the last timed event written
	prev := KindInvalid
	for {
		n, err := r.ReadEvents(buf)
		tab.sync(r, w)
		for _, ev := range buf[:n] {
			if int(ev.Text) >= len(tab.str) || int(ev.Stack) >= len(tab.stk) {
				return next, fmt.Errorf("event %d: undefined string %d or stack %d", index, ev.Text, ev.Stack)
			}
			ev.Text, ev.Stack = tab.str[ev.Text], tab.stk[ev.Stack]
			if ev.TimeNS != 0 && prev != KindFreeRequested && (index > 0 || h == nil || h.Initial == nil) {
				for next < len(samples) && samples[next].TimeNS < ev.TimeNS {
					sm := samples[next]
					sm.TimeNS = max(sm.TimeNS, last)
					if err := w.WriteEvent(sm); err != nil {
						return next, err
					}
					next++
				}
			}
			if err := w.WriteEvent(ev); err != nil {
				return next, fmt.Errorf("event %d: %w", index, err)
			}
			if ev.TimeNS != 0 {
				last = ev.TimeNS
			}
			prev = ev.Kind
			index++
		}
		if err == io.EOF || (err == nil && n == 0) {
			break
		}
		if err != nil {
			return next, fmt.Errorf("after event %d: %w", index, err)
		}
	}
	return next, nil
}

// idRemap maps a reader's string and stack IDs to a writer's: the writer
// defines them afresh, deduplicated.
type idRemap struct {
	str []StringID
	stk []StackID
}

// sync defines on w the strings and stacks r has defined since the last call.
func (m *idRemap) sync(r *Reader, w *Writer) {
	for i := len(m.str); i < r.NumStrings(); i++ {
		m.str = append(m.str, w.String(r.String(StringID(i))))
	}
	var frames []Frame
	for i := len(m.stk); i < r.NumStacks(); i++ {
		frames = frames[:0]
		for _, f := range r.Stack(StackID(i)) {
			frames = append(frames, Frame{Func: m.str[f.Func], File: m.str[f.File], Line: f.Line})
		}
		m.stk = append(m.stk, w.Stack(frames))
	}
}
