package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// A metrics log is what fragsim.monitor(log=...) appends at each tick: one
// JSON object a line, a device at a moment,
//
//	{"time_ns": T, "device": D, "device_total_bytes": TOTAL,
//	 "metrics": {"fragsim_device_free_bytes": FREE, ...}, ...}
//
// with the time in nanoseconds since the Unix epoch (the trace's clock).
// ReadMetricsLog reads its device memory as a device log's samples: each
// line becomes the device log's "T D FREE TOTAL" and goes through
// ReadDeviceLog, so the same checks apply, with the same line numbers. A
// line without the device's memory (a tick before it was known) is
// skipped, as are blank lines and lines starting with '#'.

// maxMetricsLogLine bounds a metrics log's line: a tick's record takes
// about 1 KiB.
const maxMetricsLogLine = 1 << 20

// metricsLogLine is what ReadMetricsLog reads of a line.
type metricsLogLine struct {
	TimeNS     *json.Number           `json:"time_ns"`
	Device     *json.Number           `json:"device"`
	TotalBytes *json.Number           `json:"device_total_bytes"`
	Metrics    map[string]json.Number `json:"metrics"`
}

// errMetricsLine stops ReadDeviceLog when a line is not a metrics record.
var errMetricsLine = errors.New("not a metrics record")

// ReadMetricsLog parses the device memory of a metrics log from r (plain
// or gzip'd) as ReadDeviceLog does a device log's; name labels its errors.
func ReadMetricsLog(r io.Reader, name string) ([]Event, error) {
	br := bufio.NewReader(r)
	if head, err := br.Peek(2); err == nil && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := metricsToDeviceLog(br, pw, name)
		if err != nil {
			pw.CloseWithError(errMetricsLine)
		} else {
			pw.Close()
		}
		done <- err
	}()
	evs, err := ReadDeviceLog(pr, name)
	pr.CloseWithError(io.ErrClosedPipe) // stops the converter if the device log's reader stopped first
	if cerr := <-done; cerr != nil {
		return nil, cerr
	}
	return evs, err
}

// metricsToDeviceLog writes each line of r as a device log's line to w.
func metricsToDeviceLog(r *bufio.Reader, w io.Writer, name string) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxMetricsLogLine)
	bw := bufio.NewWriter(w)
	line := 0
	for sc.Scan() {
		line++
		s := bytes.TrimSpace(sc.Bytes())
		if len(s) > 0 && s[0] != '#' {
			out, err := metricsSample(s)
			if err != nil {
				return fmt.Errorf("%s: line %d: %w", name, line, err)
			}
			s = out
		}
		bw.Write(s)
		if err := bw.WriteByte('\n'); err != nil {
			return nil // the device log's reader stopped: its error is the one
		}
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return fmt.Errorf("%s: line %d: longer than %d bytes: not a metrics log", name, line+1, maxMetricsLogLine)
		}
		return fmt.Errorf("%s: after line %d: %w", name, line, err)
	}
	bw.Flush()
	return nil
}

// metricsSample returns a metrics record's device-log line (nothing when
// the record has no device memory).
func metricsSample(s []byte) ([]byte, error) {
	var m metricsLogLine
	d := json.NewDecoder(bytes.NewReader(s))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a metrics record (a JSON object of fragsim.monitor's log): %v", err)
	}
	if d.More() {
		return nil, errors.New("more than one JSON value on the line: not a metrics record")
	}
	if m.TimeNS == nil || m.Device == nil {
		return nil, errors.New("the record lacks time_ns or device")
	}
	free, ok := m.Metrics["fragsim_device_free_bytes"]
	if m.TotalBytes == nil || !ok {
		return nil, nil // no device memory at this tick
	}
	return fmt.Appendf(nil, "%s %s %s %s", integral(*m.TimeNS), integral(*m.Device), integral(free), integral(*m.TotalBytes)), nil
}

// integral writes a JSON number that is an integer in float form (1e+09,
// 5.0) as the integer; anything else as it is, for the device log's
// parser to refuse.
func integral(n json.Number) string {
	if _, err := strconv.ParseUint(string(n), 10, 64); err == nil {
		return string(n)
	}
	if f, err := n.Float64(); err == nil && f >= 0 && f < 1<<53 && f == float64(uint64(f)) {
		return strconv.FormatUint(uint64(f), 10)
	}
	return string(n)
}

// ReadMetricsLogFile parses the metrics log at path (plain or gzip'd).
func ReadMetricsLogFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadMetricsLog(f, path)
}
