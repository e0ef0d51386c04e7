package cli

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis/report"
	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write a replay for other viewers: PyTorch's memory_viz pickle, or Perfetto's trace-event JSON",
		ArgsUsage: "[TRACE]",
		Description: "--format memory_viz replays TRACE (default: the built-in multi-agent trace) under one\n" +
			"policy or setting and writes it as a PyTorch memory snapshot pickle, to open in\n" +
			"https://pytorch.org/memory_viz: the run as it would have gone under, say, expandable\n" +
			"segments. --format perfetto replays it under each policy and writes Chrome trace-event\n" +
			"JSON for https://ui.perfetto.dev: reserved, active and requested bytes as counter tracks,\n" +
			"one process per policy, with OOMs and empty_cache calls as instant events.\n" +
			"Policies: " + strings.Join(allocator.Names(), ", ") + ".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Usage: "memory_viz or perfetto", Required: true},
			&cli.StringFlag{Name: "o", Aliases: []string{"out"}, Usage: "the file to write", Required: true},
			&cli.StringFlag{Name: "policy", Usage: "memory_viz: the policy replayed", Value: allocator.BaselineFacts().Name},
			&cli.StringFlag{Name: "policies", Usage: "perfetto: comma-separated policies to replay", Value: strings.Join(allocator.Defaults(), ",")},
			&cli.StringFlag{Name: "conf", Usage: "PYTORCH_CUDA_ALLOC_CONF string (default: the trace's own settings)"},
			&cli.StringFlag{Name: "capacity", Usage: "device memory: bytes, a size (80GiB) or a preset (h200, a100-80g, ...); default: the trace's GPU"},
			quietFlag(),
		},
		Action: runExport,
	}
}

func runExport(c *cli.Context) error {
	if c.NArg() > 1 {
		return exitCode(2, fmt.Errorf("export: one TRACE at most, got %d arguments", c.NArg()))
	}
	format := strings.ReplaceAll(strings.ToLower(c.String("format")), "-", "_")
	if format != "memory_viz" && format != "perfetto" {
		return exitCode(2, fmt.Errorf("export: unknown --format %q (memory_viz or perfetto)", c.String("format")))
	}
	open, name, err := traceSource(c, c.Args().First())
	if err != nil {
		return err
	}
	opts := report.ExportOptions{Policy: c.String("policy"), Policies: SplitList(c.String("policies")), Conf: c.String("conf"), Name: name}
	if s := c.String("capacity"); s != "" {
		if opts.Config.CapacityBytes, err = replay.ParseCapacity(s); err != nil {
			return exitCode(2, err)
		}
	}
	path := c.String("o")
	// Written to a temporary file renamed into place (package outfile): a
	// failed export leaves no partial file, and an earlier one stays whole.
	tmp, err := outfile.Create(path, name)
	if err != nil {
		return err
	}
	defer tmp.Abort()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	prog := startProgress(c.App.ErrWriter, "export", c.Bool("quiet"))
	opts.Progress = prog.replays
	var res *replay.Result
	if format == "memory_viz" {
		res, err = report.WriteMemoryViz(bw, open, opts)
	} else {
		err = report.WritePerfetto(bw, open, opts)
	}
	prog.done()
	var cut error
	if err != nil && errors.Is(err, trace.ErrTruncated) {
		cut, err = exitCode(2, fmt.Errorf("%s: %v (the export covers the events before the cut)", name, err)), nil
	}
	if err != nil {
		return callError("export", name, err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := tmp.Commit(); err != nil {
		return err
	}
	if res != nil {
		fmt.Fprintf(c.App.ErrWriter, "fragsim: wrote %s: %s under %s, peak reserved %s\n", path, name, opts.Policy,
			replay.FormatBytes(res.PeakReservedBytes))
	} else {
		fmt.Fprintf(c.App.ErrWriter, "fragsim: wrote %s\n", path)
	}
	return cut
}
