package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pytorch"
	"github.com/fragsim/fragsim/trace/rmm"
)

func importCommand() *cli.Command {
	return &cli.Command{
		Name:      "import",
		Usage:     "convert a PyTorch memory snapshot (or an RMM log) into a fragsim trace",
		ArgsUsage: "SNAPSHOT (- for standard input)",
		Description: "Reads a snapshot written by torch.cuda.memory._dump_snapshot (plain, gzip'd or\n" +
			"zstd'd pickle, protocols 2 to 5) or a RAPIDS RMM logging_resource_adaptor CSV log and\n" +
			"writes a trace. The pickle is decoded by a restricted reader: a file that tries to\n" +
			"construct objects or run code is refused, and nothing in it ever runs.\n" +
			"When the snapshot's ring buffer starts mid-run, the allocator state at its first\n" +
			"event is rebuilt from the final segments; empty_cache() calls, which PyTorch does\n" +
			"not trace, are inferred from release bursts no OOM explains. A snapshot without\n" +
			"trace entries (torch.cuda.memory_snapshot(), an OOM handler's) gives a trace of its\n" +
			"state alone. With -, the snapshot is read from standard input (--format rmm for a log);\n" +
			"with -o -, the trace goes to standard output and the summary to stderr.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the trace to `FILE` (required)"},
			&cli.StringFlag{Name: "format", Usage: "input format: auto, pytorch or rmm", Value: "auto"},
			&cli.BoolFlag{Name: "no-infer-empty-cache", Usage: "do not infer empty_cache() calls from release bursts"},
			&cli.Uint64Flag{Name: "memory-cap", Usage: "the run's memory cap in `BYTES` (fraction × device total), if any: tells a malloc's own retry from empty_cache()"},
			&cli.Float64Flag{Name: "memory-fraction", Usage: "the run's per-process memory fraction, stored in the header"},
			&cli.StringFlag{Name: "gpu", Usage: "the GPU's `NAME`, stored in the header (a snapshot does not record it)"},
			&cli.StringFlag{Name: "gpu-total", Usage: "the GPU's total memory (bytes, a size or a preset such as h200), stored in the header: a replay's default capacity"},
			&cli.StringFlag{Name: "torch", Usage: "the PyTorch `VERSION` that wrote the snapshot, stored in the header"},
			&cli.StringFlag{Name: "cuda", Usage: "the CUDA `VERSION`, stored in the header"},
			&cli.StringFlag{Name: "driver", Usage: "the driver `VERSION`, stored in the header"},
			&cli.StringSliceFlag{Name: "tag", Usage: "a `KEY=VALUE` tag for the header (repeatable), e.g. wall_native_s=1.31"},
			&cli.StringFlag{Name: "device-log", Usage: "merge the device-memory samples of `FILE` (lines of \"time_ns device free_bytes total_bytes\", plain or gzip'd) into the trace as device_mem events"},
			&cli.StringFlag{Name: "metrics-log", Usage: "merge the device memory of fragsim.monitor(log=`FILE`) (JSON lines) into the trace as device_mem events, as --device-log does"},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON"},
			quietFlag(),
		},
		Action: runImport,
	}
}

func runImport(c *cli.Context) error {
	if c.String("output") == "" {
		return exitCode(2, fmt.Errorf("import: -o OUT is required"))
	}
	if c.NArg() != 1 {
		return exitCode(2, fmt.Errorf("import: want one SNAPSHOT argument, got %d", c.NArg()))
	}
	in, out := c.Args().First(), c.String("output")
	logFlag, logPath, readLog := "device-log", c.String("device-log"), trace.ReadDeviceLogFile
	if m := c.String("metrics-log"); m != "" {
		if logPath != "" {
			return exitCode(2, fmt.Errorf("import: give --device-log or --metrics-log, not both"))
		}
		logFlag, logPath, readLog = "metrics-log", m, trace.ReadMetricsLogFile
	}
	// Every file the import reads is an input the output may not be.
	if err := outfile.Check(out, in, logPath); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	format := c.String("format")
	switch format {
	case "auto":
		format = pytorch.DetectFormat(in)
	case pytorch.FormatPyTorch, pytorch.FormatRMM:
	default:
		return exitCode(2, fmt.Errorf("import: --format %q: want auto, pytorch or rmm", format))
	}
	var meta *trace.Header
	fraction := c.Float64("memory-fraction")
	if format != pytorch.FormatRMM {
		var err error
		if meta, err = importMeta(c); err != nil {
			return exitCode(2, fmt.Errorf("import: %w", err))
		}
		if math.IsNaN(fraction) || fraction < 0 || fraction > 1 {
			return exitCode(2, fmt.Errorf("import: --memory-fraction %v: want a fraction from 0 to 1", fraction))
		}
	}
	var samples []trace.Event
	dest := out
	if logPath != "" {
		var err error
		if samples, err = readLog(logPath); err != nil {
			return fmt.Errorf("import: --%s: %w", logFlag, err)
		}
		// The import writes a scratch trace and the merge writes out from
		// it (mergeDeviceLog): out is replaced once, by the whole merged
		// trace, and never when the import or the merge fails.
		scratch, err := outfile.NewScratch(outfile.Dir(out), ".fragsim-import-*.fst")
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		defer scratch.Remove()
		dest = scratch.Path()
	}
	prog := startProgress(c.App.ErrWriter, "import", c.Bool("quiet"))
	start := time.Now()
	var summary any
	var print func()
	// kept is the import's error when the events before it were written
	// all the same: a snapshot cut short (exit 2), a log's bad line.
	var kept error
	switch format {
	case pytorch.FormatRMM:
		sum, err := rmm.ImportFile(in, dest)
		if err != nil {
			if sum == nil || sum.Output == "" {
				return fmt.Errorf("import: %w; nothing was written to %s", err, out)
			}
			kept = fmt.Errorf("import: %w; kept the %d valid events before the bad line in %s (its header says the log was cut)", err, sum.Events, out)
		}
		sum.Output = out
		summary, print = sum, func() { importPrintRMM(trace.PrintableWriter(c.App.Writer), sum, time.Since(start)) }
	default:
		opt := pytorch.Options{
			NoInferEmptyCache: c.Bool("no-infer-empty-cache"),
			MemoryCapBytes:    c.Uint64("memory-cap"),
			MemoryFraction:    fraction,
			MaxSizeBytes:      meta.GPUTotalBytes,
			Meta:              meta,
			Progress:          importProgress(prog),
		}
		defer pytorch.TuneGC(in)() // restored once the output is written
		sum, err := pytorch.ImportFile(in, dest, opt)
		prog.done()
		if err != nil {
			if sum == nil || sum.Output == "" {
				return fmt.Errorf("import: %w; nothing was written to %s", err, out)
			}
			kept = exitCode(2, fmt.Errorf("import: %w; kept the %d events before the cut in %s (its header says the snapshot was cut)", err, sum.Events, out))
		}
		sum.Output = out
		summary, print = sum, func() {
			w := trace.PrintableWriter(c.App.Writer)
			importPrintPyTorch(w, sum, time.Since(start))
			importAdvice(w, sum)
		}
	}
	if dest != out {
		if err := importDeviceLog(c.App.ErrWriter, dest, out, logFlag, logPath, samples, in); err != nil {
			return err
		}
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if err := enc.Encode(summary); err != nil {
			return err
		}
	} else {
		print()
	}
	return kept
}

// importAdvice prints what the summary s calls for: how to record a
// snapshot that allows what-ifs, for a state-only one; the flags that
// tell a capped run's retries from empty_cache() (s.CapAdvice).
func importAdvice(w io.Writer, s *pytorch.Summary) {
	if s.StateOnly {
		fmt.Fprintf(w, "state-only:  the snapshot holds the allocator's state but no history: what-ifs need "+
			"torch.cuda.memory._record_memory_history(enabled=\"all\", max_entries=1000000) before the run, "+
			"then torch.cuda.memory._dump_snapshot(path)\n")
	}
	a := s.CapAdvice()
	if a == nil {
		return
	}
	f := "F"
	est := fmt.Sprintf("F is the fraction given to set_per_process_memory_fraction; at least the peak reserved, %s, over the GPU's memory",
		analysis.FmtBytes(a.PeakReservedBytes))
	gpu := "--gpu-total NAME"
	if a.Fraction != "" {
		f = a.Fraction
		est = fmt.Sprintf("%s is the peak reserved, %s, over the GPU's %s, rounded up: the least the cap can have been",
			f, analysis.FmtBytes(a.PeakReservedBytes), analysis.FmtBytes(a.GPUTotalBytes))
		gpu = "--gpu-total " + strconv.FormatUint(a.GPUTotalBytes, 10)
	}
	fmt.Fprintf(w, "advice:      %d release bursts right before a new segment look like a memory cap's retries or garbage collection; "+
		"if the run was capped, import with --memory-fraction %s %s (%s)\n", a.Bursts, f, gpu, est)
}

// importMeta gathers the header fields given on the command line.
func importMeta(c *cli.Context) (*trace.Header, error) {
	m := &trace.Header{
		GPUName:       c.String("gpu"),
		TorchVersion:  c.String("torch"),
		CUDAVersion:   c.String("cuda"),
		DriverVersion: c.String("driver"),
	}
	if s := c.String("gpu-total"); s != "" {
		v, err := replay.ParseCapacity(s)
		if err != nil {
			return nil, fmt.Errorf("--gpu-total: %w", err)
		}
		m.GPUTotalBytes = v
	}
	for _, kv := range c.StringSlice("tag") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--tag %q: want KEY=VALUE", kv)
		}
		if m.Tags == nil {
			m.Tags = map[string]string{}
		}
		m.Tags[k] = v
	}
	return m, nil
}

// importProgress reports an import's phases on its progress line.
func importProgress(p *progressLine) func(phase string, done, total int64) {
	if !p.active() {
		return nil
	}
	return func(phase string, done, total int64) {
		if total > 0 {
			p.update("%-7s %3d%%", phase, done*100/total)
		} else {
			p.update("%-7s %s", phase, analysis.FmtBytes(uint64(done)))
		}
	}
}

func importKinds(kinds map[string]int) string {
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, kinds[k])
	}
	return strings.Join(parts, ", ")
}

func importWindow(first, last int64) string {
	d := float64(last-first) / 1e9
	if first > 1e18 { // epoch nanoseconds
		return fmt.Sprintf("%.3f s (%s .. %s)", d, time.Unix(0, first).UTC().Format("2006-01-02 15:04:05.000"), time.Unix(0, last).UTC().Format("15:04:05.000"))
	}
	return fmt.Sprintf("%.3f s", d)
}

func importPrintPyTorch(w io.Writer, s *pytorch.Summary, wall time.Duration) {
	var outSize int64
	if fi, err := os.Stat(s.Output); err == nil {
		outSize = fi.Size()
	}
	fmt.Fprintf(w, "imported %s (%s, pickle %s) -> %s (%s) in %.2f s\n", s.Input, analysis.FmtBytes(uint64(s.InputBytes)),
		analysis.FmtBytes(uint64(s.PickleBytes)), s.Output, analysis.FmtBytes(uint64(outSize)), wall.Seconds())
	fmt.Fprintf(w, "events:      %d (%s)\n", s.Events, importKinds(s.Kinds))
	devs := make([]string, len(s.Devices))
	for i, d := range s.Devices {
		devs[i] = fmt.Sprint(d)
	}
	fmt.Fprintf(w, "devices:     %s\n", strings.Join(devs, ", "))
	fmt.Fprintf(w, "streams:     %d\n", len(s.Streams))
	fmt.Fprintf(w, "time window: %s\n", importWindow(s.FirstNS, s.LastNS))
	if s.MidRun {
		fmt.Fprintf(w, "initial:     the trace starts mid-run: %d segments, %d blocks, %s reserved at its first event\n",
			s.InitialSegs, s.InitialBlks, analysis.FmtBytes(s.ReservedInit))
	} else {
		fmt.Fprintf(w, "initial:     empty allocator at the first event\n")
	}
	fmt.Fprintf(w, "empty_cache: %d inferred\n", s.EmptyCaches)
	fmt.Fprintf(w, "stacks:      %d events with a call stack; %d markers\n", s.Stacks, s.Markers)
	for _, a := range s.Approximate {
		fmt.Fprintf(w, "approximate: %s\n", trace.Printable(a))
	}
}

func importPrintRMM(w io.Writer, s *rmm.Summary, wall time.Duration) {
	fmt.Fprintf(w, "imported %s (RMM log, %d lines) -> %s in %.2f s\n", s.Input, s.Lines, s.Output, wall.Seconds())
	fmt.Fprintf(w, "events:      %d (%s)\n", s.Events, importKinds(s.Kinds))
	fmt.Fprintf(w, "streams:     %d; threads: %d\n", len(s.Streams), s.Threads)
	fmt.Fprintf(w, "time window: %s\n", importWindow(s.FirstNS, s.LastNS))
	for _, n := range s.Clock {
		fmt.Fprintf(w, "clock:       %s\n", trace.Printable(n))
	}
}
