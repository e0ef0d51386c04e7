package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/monitor"
	"github.com/fragsim/fragsim/trace/pytorch"
)

func monitorCommand() *cli.Command {
	return &cli.Command{
		Name:  "monitor",
		Usage: "compute a running process's allocator metrics from the snapshots it sends on standard input (fragsim.monitor runs it)",
		Description: "The computing half of fragsim.monitor (Python): the service's monitor thread starts\n" +
			"this command once and sends it, every tick, one frame on standard input:\n" +
			"  a JSON line: {\"time_ns\": T, \"snapshot_bytes\": N, \"devices\": [{\"device\": D,\n" +
			"    \"free_bytes\": F, \"total_bytes\": TOTAL, \"stats\": {torch.cuda.memory_stats(D)}}, ...]}\n" +
			"  then N bytes: the pickle of torch.cuda.memory_snapshot() (the segments; a dict with\n" +
			"    \"segments\" too), plain.\n" +
			"For each frame it writes one JSON line: {\"records\": [...]}, one record per device:\n" +
			"time_ns, device, device_total_bytes, metrics (each metric's value by its Prometheus\n" +
			"name), and risk_crossed, warning and remedy when the silent-OOM risk is on; or\n" +
			"{\"error\": \"...\"} for a frame whose snapshot could not be read. Its first line\n" +
			"names the metrics: {\"metrics\": [{\"name\", \"type\", \"help\"}], \"reserve_bytes\": R}.\n" +
			"The risk is the forecast's (fragsim cohost): the device's free memory below what\n" +
			"the memory outside the allocator may still ask for at once (--outside-reserve).\n" +
			"A bad frame header ends it with exit status 2; the end of the input, with 0.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "outside-reserve", Usage: "free device memory the memory outside the allocator may still ask for; below it, a silent-OOM risk (default 172MiB)"},
		},
		Action: runMonitor,
	}
}

// monitorFrame is a frame's header line.
type monitorFrame struct {
	TimeNS        int64           `json:"time_ns"`
	SnapshotBytes int64           `json:"snapshot_bytes"`
	Devices       []monitorDevice `json:"devices"`
}

type monitorDevice struct {
	Device     int                        `json:"device"`
	FreeBytes  uint64                     `json:"free_bytes"`
	TotalBytes uint64                     `json:"total_bytes"`
	Stats      map[string]json.RawMessage `json:"stats"`
}

const (
	// maxFrameHeader bounds a frame's header line: memory_stats() of a
	// few devices takes a few KiB.
	maxFrameHeader = 1 << 20
	// maxFrameSnapshot bounds a frame's snapshot.
	maxFrameSnapshot = 4 << 30
)

func runMonitor(c *cli.Context) error {
	if c.NArg() > 1 || c.NArg() == 1 && c.Args().First() != "-" {
		return exitCode(2, fmt.Errorf("monitor: reads its frames from standard input: want no argument or -, got %q", c.Args().Slice()))
	}
	var o monitor.Options
	if s := c.String("outside-reserve"); s != "" {
		v, err := replay.ParseCapacity(s)
		if err != nil || v == 0 {
			return exitCode(2, fmt.Errorf("monitor: --outside-reserve %q: want a size above 0 (%v)", s, err))
		}
		o.ReserveBytes = v
	}
	m := monitor.New(o)
	w := bufio.NewWriter(c.App.Writer)
	enc := json.NewEncoder(w)
	type described struct {
		Name string `json:"name"`
		Type string `json:"type"`
		Help string `json:"help"`
	}
	hello := struct {
		Metrics      []described `json:"metrics"`
		ReserveBytes uint64      `json:"reserve_bytes"`
		Version      string      `json:"version"`
	}{ReserveBytes: m.ReserveBytes(), Version: Version}
	for _, d := range monitor.Metrics {
		hello.Metrics = append(hello.Metrics, described{d.Name, d.Type, d.Help})
	}
	if err := enc.Encode(hello); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	r := bufio.NewReaderSize(c.App.Reader, 64<<10)
	var buf []byte
	for n := 1; ; n++ {
		f, err := readFrameHeader(r)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return exitCode(2, fmt.Errorf("monitor: frame %d: %w", n, err))
		}
		if cap(buf) < int(f.SnapshotBytes) {
			buf = make([]byte, f.SnapshotBytes)
		}
		buf = buf[:f.SnapshotBytes]
		if _, err := io.ReadFull(r, buf); err != nil {
			return exitCode(2, fmt.Errorf("monitor: frame %d: its snapshot ends after fewer than %d bytes: %w", n, f.SnapshotBytes, err))
		}
		recs, err := monitorFrameRecords(m, f, buf)
		if err != nil {
			err = enc.Encode(struct {
				Error string `json:"error"`
			}{fmt.Sprintf("frame %d: %v", n, err)})
		} else {
			err = enc.Encode(struct {
				Records []monitor.Record `json:"records"`
			}{recs})
		}
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			return err
		}
	}
}

// readFrameHeader reads and checks a frame's header line; io.EOF at the
// end of the input.
func readFrameHeader(r *bufio.Reader) (*monitorFrame, error) {
	var line []byte
	for {
		part, err := r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxFrameHeader {
			return nil, fmt.Errorf("header line longer than %d bytes", maxFrameHeader)
		}
		if err == nil {
			break
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(line) == 0 {
			return nil, io.EOF
		}
		if err == io.EOF {
			return nil, errors.New("the input ends inside a header line")
		}
		return nil, err
	}
	f := &monitorFrame{}
	if err := json.Unmarshal(line, f); err != nil {
		return nil, fmt.Errorf("header %.80q: %w", line, err)
	}
	if f.SnapshotBytes < 0 || f.SnapshotBytes > maxFrameSnapshot {
		return nil, fmt.Errorf("snapshot_bytes %d: want 0 to %d", f.SnapshotBytes, int64(maxFrameSnapshot))
	}
	for _, d := range f.Devices {
		if d.Device < 0 || d.FreeBytes > d.TotalBytes {
			return nil, fmt.Errorf("device %d: free_bytes %d, total_bytes %d: want a device from 0 and free bytes at most the total",
				d.Device, d.FreeBytes, d.TotalBytes)
		}
	}
	return f, nil
}

// monitorFrameRecords computes each device's record of a frame whose
// snapshot pickle is data (none: an allocator that holds nothing).
func monitorFrameRecords(m *monitor.Monitor, f *monitorFrame, data []byte) ([]monitor.Record, error) {
	layouts := map[int]*monitor.Layout{}
	for _, d := range f.Devices {
		layouts[d.Device] = &monitor.Layout{}
	}
	if len(data) > 0 {
		snap, err := pytorch.LoadPickle(data, pytorch.Options{Workers: 1, NoInferEmptyCache: true})
		if err != nil {
			return nil, err
		}
		if h := snap.Header(); h.Initial != nil {
			for _, s := range h.Initial.Segments {
				if l := layouts[int(s.Device)]; l != nil {
					l.Add(s)
				}
			}
		}
		snap.Close()
	}
	recs := make([]monitor.Record, 0, len(f.Devices))
	for _, d := range f.Devices {
		counters, err := monitorCounters(d.Stats)
		if err != nil {
			return nil, fmt.Errorf("device %d: stats: %w", d.Device, err)
		}
		g := m.Observe(monitor.Sample{TimeNS: f.TimeNS, Device: d.Device, Layout: *layouts[d.Device], Counters: counters,
			DeviceFreeBytes: d.FreeBytes, DeviceTotalBytes: d.TotalBytes})
		recs = append(recs, g.Record())
	}
	return recs, nil
}

// monitorCounters reads the allocator's counters of torch.cuda.memory_stats()
// (nil when it gave none: an allocator that keeps no statistics).
func monitorCounters(stats map[string]json.RawMessage) (*monitor.Counters, error) {
	if len(stats) == 0 {
		return nil, nil
	}
	c := &monitor.Counters{}
	for _, k := range []struct {
		key string
		dst *uint64
	}{
		{"reserved_bytes.all.current", &c.ReservedBytes},
		{"allocated_bytes.all.current", &c.AllocatedBytes},
		{"inactive_split_bytes.all.current", &c.InactiveSplitBytes},
		{"num_ooms", &c.OOMs},
		{"num_alloc_retries", &c.AllocRetries},
	} {
		v, ok := stats[k.key]
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s = %.40s: want a count", k.key, v)
		}
		*k.dst = n
	}
	return c, nil
}
