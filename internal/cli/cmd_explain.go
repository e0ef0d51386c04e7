package cli

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pytorch"
)

func explainCommand() *cli.Command {
	return &cli.Command{
		Name:      "explain",
		Usage:     "explain an out-of-memory failure: fragmentation, exhaustion or memory outside the allocator, and the setting that fits",
		ArgsUsage: "SNAPSHOT (a PyTorch snapshot, - for standard input, or a trace)",
		Description: "Reads the snapshot taken at an OOM (torch.cuda.memory._snapshot(), plain, gzip'd or\n" +
			"zstd'd, or a trace) and says, for the failed request: the allocator's reserved, allocated\n" +
			"and cached free bytes and its largest free block, and the class of the failure:\n" +
			"  fragmentation  cached free >= request > largest free block: free bytes were enough, no block was\n" +
			"  outside        request > cached free, and the memory outside the allocator (device total -\n" +
			"                 reserved - device free) would have covered the shortfall\n" +
			"  exhaustion     everything else\n" +
			"With history (torch.cuda.memory._record_memory_history), the state is PyTorch's allocator\n" +
			"replayed to the snapshot's last oom entry, whose size is the request, and the\n" +
			"explanation adds the recommendation for --goal fit: the memory cap, else the device\n" +
			"total less the memory outside the allocator (as compare gives it): the cheapest\n" +
			"setting under which the run so far, the failed request included, fits.\n" +
			"A state alone needs --request (the size PyTorch's OOM message says it tried to allocate).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "request", Usage: "the failed request's `BYTES` (or a size such as 20MiB); default: the snapshot's last oom entry"},
			&cli.StringFlag{Name: "device-total", Usage: "the device's total memory (`SIZE`, or a preset such as h200), from torch.cuda.mem_get_info; default: the trace's GPU total"},
			&cli.StringFlag{Name: "device-free", Usage: "the device's free memory at the failure (`SIZE`), from torch.cuda.mem_get_info; default: the oom entry's"},
			&cli.StringFlag{Name: "memory-cap", Usage: "the process's memory cap (`SIZE`: fraction x device total), when a memory fraction was set"},
			&cli.IntFlag{Name: "device", Usage: "the failing device `N` (default: the last oom entry's, else the only device)", Value: -1},
			&cli.BoolFlag{Name: "json", Usage: "print the explanation as JSON: reserved_bytes, allocated_bytes, cached_free_bytes, " +
				"largest_free_block_bytes, request_bytes, outside_bytes (when the device figures are known), class, and fit with history"},
			quietFlag(),
		},
		Action: runExplain,
	}
}

func runExplain(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, fmt.Errorf("explain: want one SNAPSHOT argument, got %d", c.NArg()))
	}
	in := c.Args().First()
	var opts analysis.ExplainOptions
	sizes := []struct {
		flag string
		dst  *uint64
	}{{"request", &opts.RequestBytes}, {"device-total", &opts.DeviceTotalBytes},
		{"device-free", &opts.DeviceFreeBytes}, {"memory-cap", &opts.CapBytes}}
	for _, s := range sizes {
		if v := c.String(s.flag); v != "" {
			n, err := replay.ParseCapacity(v)
			if err != nil {
				return exitCode(2, fmt.Errorf("explain: --%s: %w", s.flag, err))
			}
			*s.dst = n
		}
	}
	if d := c.Int("device"); d >= 0 {
		dev := trace.DeviceID(d)
		opts.Device = &dev
	}
	open, cleanup, err := explainSource(in, opts)
	if err != nil {
		return err
	}
	defer cleanup()
	opts.Name = in
	prog := startProgress(c.App.ErrWriter, "explain", c.Bool("quiet"))
	opts.Progress = func(events int64, done, runs int) {
		prog.update("%d/%d replays done, %s events replayed", done, runs, fmtMillions(events))
	}
	x, err := analysis.Explain(open, opts)
	prog.done()
	if errors.Is(err, analysis.ErrNoRequest) {
		return exitCode(2, fmt.Errorf("explain: %s: %w; give --request BYTES (the size the OOM message says "+
			"PyTorch tried to allocate)", in, err))
	}
	if err != nil {
		return fmt.Errorf("explain: %s: %w", in, err)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		err = enc.Encode(x)
	} else {
		for _, l := range x.Lines() {
			if _, err = fmt.Fprintln(c.App.Writer, trace.Printable(l)); err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	if x.Truncated != "" {
		return exitCode(2, fmt.Errorf("%s: %s (the figures cover the events before the cut)", in, x.Truncated))
	}
	return nil
}

// explainSource opens a trace as it is, and imports a PyTorch snapshot
// (a file or standard input) into a temporary trace, with the device
// figures of opts in its header (a snapshot records neither the GPU's
// memory nor the memory fraction). cleanup removes the temporary trace.
func explainSource(in string, opts analysis.ExplainOptions) (analysis.Opener, func(), error) {
	if in != "-" && trace.IsTraceFile(in) {
		return replay.OpenFile(in), func() {}, nil
	}
	// A scratch file, removed by cleanup and on an interrupt.
	scratch, err := outfile.NewScratch("", "fragsim-explain-*.fst")
	if err != nil {
		return nil, nil, err
	}
	cleanup := scratch.Remove
	meta := &trace.Header{GPUTotalBytes: opts.DeviceTotalBytes}
	opt := pytorch.Options{Meta: meta, MaxSizeBytes: opts.DeviceTotalBytes, MemoryCapBytes: opts.CapBytes}
	if opts.CapBytes > 0 && opts.DeviceTotalBytes > 0 && opts.CapBytes < opts.DeviceTotalBytes {
		opt.MemoryFraction = float64(opts.CapBytes) / float64(opts.DeviceTotalBytes)
	}
	tmp := scratch.Path()
	if _, err := pytorch.ImportFile(in, tmp, opt); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("explain: %w", err)
	}
	return replay.OpenFile(tmp), cleanup, nil
}
