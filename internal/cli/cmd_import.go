package cli

import (
	"encoding/json"
	"fmt"
	"github.com/fragsim/fragsim/analysis"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pytorch"
	"github.com/fragsim/fragsim/trace/rmm"
	"github.com/urfave/cli/v2"
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
			"state alone. With -, the snapshot is read from standard input (--format rmm for a log).",
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
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress on stderr"},
		},
		Action: runImport,
	}
}

func runImport(c *cli.Context) (err error) {
	if c.String("output") == "" {
		return exitCode(2, fmt.Errorf("import: -o OUT is required"))
	}
	if c.NArg() != 1 {
		return exitCode(2, fmt.Errorf("import: want one SNAPSHOT argument, got %d", c.NArg()))
	}
	in, out := c.Args().First(), c.String("output")
	if err := importSameFile(in, out); err != nil {
		return exitCode(2, fmt.Errorf("import: %w", err))
	}
	var head inputHead
	if in != "-" {
		head = readHead(in)
	}
	format := c.String("format")
	switch format {
	case "auto":
		format = "pytorch"
		if in != "-" {
			format = importDetect(in, head)
		}
	case "pytorch", "rmm":
	default:
		return exitCode(2, fmt.Errorf("import: --format %q: want auto, pytorch or rmm", format))
	}
	var samples []trace.Event
	if p := c.String("device-log"); p != "" {
		var err error
		if samples, err = trace.ReadDeviceLogFile(p); err != nil {
			return fmt.Errorf("import: --device-log: %w", err)
		}
		defer func() {
			if err == nil {
				err = importDeviceLog(c.App.ErrWriter, out, p, samples)
			}
		}()
	}
	prog := startProgress(c.App.ErrWriter, "import", c.Bool("quiet"))
	start := time.Now()
	var summary any
	switch format {
	case "rmm":
		sum, err := rmm.ImportFile(in, out)
		if err != nil {
			if sum != nil && sum.Output != "" {
				fmt.Fprintf(c.App.ErrWriter, "import: kept the %d valid events before the bad line in %s (its header says the log was cut)\n", sum.Events, out)
			} else {
				fmt.Fprintf(c.App.ErrWriter, "import: nothing was written to %s\n", out)
			}
			return fmt.Errorf("import: %w", err)
		}
		summary = sum
		if !c.Bool("json") {
			importPrintRMM(c.App.Writer, sum, time.Since(start))
		}
	default:
		meta, err := importMeta(c)
		if err != nil {
			return exitCode(2, fmt.Errorf("import: %w", err))
		}
		fraction := c.Float64("memory-fraction")
		if math.IsNaN(fraction) || fraction < 0 || fraction > 1 {
			return exitCode(2, fmt.Errorf("import: --memory-fraction %v: want a fraction from 0 to 1", fraction))
		}
		opt := pytorch.Options{
			NoInferEmptyCache: c.Bool("no-infer-empty-cache"),
			MemoryCapBytes:    c.Uint64("memory-cap"),
			MemoryFraction:    fraction,
			MaxSizeBytes:      meta.GPUTotalBytes,
			Meta:              meta,
			Progress:          importProgress(prog),
		}
		if opt.MemoryCapBytes == 0 && opt.MemoryFraction > 0 && opt.MemoryFraction < 1 && meta.GPUTotalBytes > 0 {
			// PyTorch's cap: (size_t)(fraction × (double)totalGlobalMem).
			opt.MemoryCapBytes = uint64(opt.MemoryFraction * float64(meta.GPUTotalBytes))
		}
		// Restored once the command's output is written: with the
		// import's heap live, turning the collector back on starts a
		// collection, which would hold the summary's printing.
		defer importGC(head)()
		sum, err := pytorch.ImportFile(in, out, opt)
		prog.done()
		if err != nil {
			if sum != nil && sum.Output != "" {
				// A cut-off snapshot: the entries before the cut were kept.
				return fmt.Errorf("import: %w; kept the %d events before the cut in %s (its header says the snapshot was cut)", err, sum.Events, out)
			}
			return fmt.Errorf("import: %w; nothing was written to %s", err, out)
		}
		summary = sum
		if !c.Bool("json") {
			importPrintPyTorch(c.App.Writer, sum, time.Since(start))
			importAdvice(c.App.Writer, sum, meta.GPUTotalBytes, opt.MemoryCapBytes)
		}
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(summary)
	}
	return nil
}

// importSameFile refuses an output that is the input (the same file,
// through any name or link): the import would replace the snapshot.
func importSameFile(in, out string) error {
	if in == "-" {
		return nil
	}
	a, err := os.Stat(in)
	if err != nil {
		return nil // the import reports it
	}
	if b, err := os.Stat(out); err == nil && os.SameFile(a, b) {
		return fmt.Errorf("the output %s is the input %s: refusing to replace it", out, in)
	}
	return nil
}

// importAdvice prints what the summary s calls for: how to record a
// snapshot that allows what-ifs, for a state-only one; the flags that
// tell a capped run's retries from empty_cache(), when release bursts
// look like them and no cap was given. total is the GPU's memory (0:
// not known), capBytes the cap the import knew.
func importAdvice(w io.Writer, s *pytorch.Summary, total, capBytes uint64) {
	if s.StateOnly {
		fmt.Fprintf(w, "state-only:  the snapshot holds the allocator's state but no history: what-ifs need "+
			"torch.cuda.memory._record_memory_history(enabled=\"all\", max_entries=1000000) before the run, "+
			"then torch.cuda.memory._dump_snapshot(path)\n")
	}
	if s.CapLikeBursts == 0 || capBytes > 0 {
		return
	}
	f := "F"
	est := fmt.Sprintf("F is the fraction given to set_per_process_memory_fraction; at least the peak reserved, %s, over the GPU's memory",
		analysis.FmtBytes(s.PeakReserved))
	gpu := "--gpu-total NAME"
	if total > 0 && s.PeakReserved > 0 && s.PeakReserved <= total {
		f = importFraction(s.PeakReserved, total)
		est = fmt.Sprintf("%s is the peak reserved, %s, over the GPU's %s, rounded up: the least the cap can have been",
			f, analysis.FmtBytes(s.PeakReserved), analysis.FmtBytes(total))
		gpu = "--gpu-total " + strconv.FormatUint(total, 10)
	}
	fmt.Fprintf(w, "advice:      %d release bursts right before a new segment look like a memory cap's retries or garbage collection; "+
		"if the run was capped, import with --memory-fraction %s %s (%s)\n", s.CapLikeBursts, f, gpu, est)
}

// importFraction returns peak/total rounded up at 3 significant digits.
func importFraction(peak, total uint64) string {
	f := float64(peak) / float64(total)
	scale := math.Pow(10, 2-math.Floor(math.Log10(f)))
	return strconv.FormatFloat(math.Ceil(f*scale)/scale, 'g', 3, 64)
}

// inputHead is what the import command reads of its input before
// importing it: its first bytes, and whether it is a regular file of size
// bytes.
type inputHead struct {
	bytes   []byte
	regular bool
	size    int64
}

// readHead reads the first headBytes of the file path (fewer when it is
// shorter; none when it cannot be read: the import reports the error).
func readHead(path string) inputHead {
	var h inputHead
	// A pipe or a FIFO gives its bytes once: they are the import's, and
	// it is not even opened here (a FIFO's writer would meet this open).
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return h
	}
	f, err := os.Open(path)
	if err != nil {
		return h
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil {
		h.regular, h.size = st.Mode().IsRegular(), st.Size()
	}
	b := make([]byte, headBytes)
	n, _ := io.ReadFull(f, b)
	h.bytes = b[:n]
	return h
}

// importGC turns the garbage collector off for the import of an input
// that begins with head when it is a plain pickle of at most
// gcOffMaxBytes (and neither GOGC nor GOMEMLIMIT is set), and returns
// what restores the settings.
// Such an import allocates a few times its input, most of it live to the
// end, and in a fresh process the collections while the heap was still
// small stall the decoder in mark assists, for little memory saved. A
// memory limit of gcOffLimitBytes stays: near it the collector
// runs. Larger and compressed inputs (whose pickle may be far larger
// than the file) keep the collector, and with it the import's flat
// memory.
func importGC(head inputHead) (restore func()) {
	none := func() {}
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return none
	}
	if !head.regular || len(head.bytes) == 0 || head.bytes[0] != 0x80 { // PROTO: a pickle of protocol 2 or later
		return none
	}
	if head.size > gcOffMaxBytes {
		// The decoder holds what it builds to a budget proportional to the
		// input (trace/pickle); a soft memory limit a little above it keeps
		// the collector's slack from doubling that in a hostile file.
		limit := debug.SetMemoryLimit(int64(memLimitPerByte*head.size) + memLimitFloor)
		return func() { debug.SetMemoryLimit(limit) }
	}
	pct := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(gcOffLimitBytes)
	return func() {
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(pct)
	}
}

// gcOffMaxBytes is the largest plain pickle imported with the garbage
// collector off (its peak RSS is about the same either way),
// and gcOffLimitBytes the memory limit kept meanwhile.
const (
	gcOffMaxBytes   = 64 << 20
	gcOffLimitBytes = 1 << 30
)

// A larger plain pickle is imported under a soft memory limit of
// memLimitPerByte bytes per byte of input and memLimitFloor more: real
// snapshots' decoded tables take 1.2 to 2.2 bytes per byte, and the
// decoder refuses a pickle past 3.
const (
	memLimitPerByte = 4
	memLimitFloor   = 256 << 20
)

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

// headBytes is what readHead reads: enough for an RMM log's first
// column name after a byte-order mark (7 bytes, which left the mark's 3
// and "Thre", did not tell such a log from a snapshot).
const headBytes = len("\ufeff") + len(rmmFirstColumn)

// rmmFirstColumn is how an RMM log's header line starts.
const rmmFirstColumn = "Thread,"

// importDetect tells an RMM CSV log from a snapshot by its name and its
// first bytes.
func importDetect(path string, head inputHead) string {
	if strings.EqualFold(filepath.Ext(path), ".csv") {
		return "rmm"
	}
	if strings.HasPrefix(strings.TrimPrefix(string(head.bytes), "\ufeff"), rmmFirstColumn) {
		return "rmm"
	}
	return "pytorch"
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
		fmt.Fprintf(w, "approximate: %s\n", a)
	}
}

func importPrintRMM(w io.Writer, s *rmm.Summary, wall time.Duration) {
	fmt.Fprintf(w, "imported %s (RMM log, %d lines) -> %s in %.2f s\n", s.Input, s.Lines, s.Output, wall.Seconds())
	fmt.Fprintf(w, "events:      %d (%s)\n", s.Events, importKinds(s.Kinds))
	fmt.Fprintf(w, "streams:     %d; threads: %d\n", len(s.Streams), s.Threads)
	fmt.Fprintf(w, "time window: %s\n", importWindow(s.FirstNS, s.LastNS))
	for _, n := range s.Clock {
		fmt.Fprintf(w, "clock:       %s\n", n)
	}
}
