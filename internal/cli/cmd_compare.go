package cli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/analysis/plot"
	"github.com/fragsim/fragsim/analysis/report"
	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/replay"
)

func compareCommand() *cli.Command {
	return &cli.Command{
		Name:      "compare",
		Usage:     "replay a trace under several allocator policies and settings, side by side, with a verdict",
		ArgsUsage: "[TRACE]",
		Description: "Replays TRACE (default: the built-in multi-agent trace) under each policy in parallel\n" +
			"and under PyTorch's own settings (expandable_segments, max_split_size_mb,\n" +
			"roundup_power2_divisions, garbage_collection_threshold, periodic empty_cache, and\n" +
			"combinations), prints the fragmentation views of the policies side by side, every\n" +
			"candidate ranked for --goal, the setting recommended (the same as analyze's), and the\n" +
			"verdict: fragmentation before (the baseline, " + allocator.BaselineFacts().Name + ", at peak reserved)\n" +
			"and after (the recommendation; the physical limit is shown, never chosen).\n" +
			"Policies: " + strings.Join(allocator.Names(), ", ") + ".",
		Flags: append(compareFlags(),
			&cli.StringFlag{Name: "out", Usage: "write the plots (PNG and SVG) to this directory"},
			&cli.StringFlag{Name: "html", Usage: "also write the interactive HTML report (timeline, segment map, recommendation) to this file"},
			&cli.BoolFlag{Name: "json", Usage: "print the full comparison as JSON"},
			&cli.BoolFlag{Name: "csv", Usage: "print one CSV row per policy and setting"},
			quietFlag(),
		),
		Action: runCompare,
	}
}

// compareFlags are the flags that say what a comparison replays and
// weighs: --policies, --conf, --setting, --capacity and --goal.
// compareOptions maps them; a command that compares takes both.
func compareFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "policies", Usage: "comma-separated policies to replay", Value: strings.Join(allocator.Defaults(), ",")},
		&cli.StringFlag{Name: "conf", Usage: "PYTORCH_CUDA_ALLOC_CONF string for every policy (default: the trace's own settings)"},
		&cli.StringSliceFlag{Name: "setting", Usage: "a setting of the baseline policy to consider, e.g. max_split_size_mb:128, or several knobs as PYTORCH_CUDA_ALLOC_CONF joins them (max_split_size_mb:128,garbage_collection_threshold:0.8) (repeatable; replaces the default variants; 'none' for none)"},
		&cli.StringFlag{Name: "capacity", Usage: "device memory: bytes, a size (80GiB) or a preset (h200, a100-80g, ...); default: the trace's GPU"},
		goalFlag(),
	}
}

// compareOptions maps the flags of compareFlags to the options of
// analysis.Compare: --policies (comma-separated; the registry's defaults
// when empty), --conf, --setting (each a setting of the baseline policy;
// 'none' for none; not given: the default variants), --capacity and
// --goal. A bad --goal or --capacity is a usage error here (exit 2). The
// policies, conf and settings are the library's to check: Compare refuses
// a bad one with an *analysis.OptionError before any replay, which
// callError makes a usage error. The trace, its name, progress and
// outputs are the caller's to set.
func compareOptions(c *cli.Context) (analysis.CompareOptions, error) {
	opts := analysis.CompareOptions{Policies: SplitList(c.String("policies")), Conf: c.String("conf")}
	var err error
	if opts.Goal, err = analysis.ParseGoal(c.String("goal")); err != nil {
		return opts, exitCode(2, fmt.Errorf("%s: --goal: %w", c.Command.Name, err))
	}
	if s := c.String("capacity"); s != "" {
		if opts.Config.CapacityBytes, err = replay.ParseCapacity(s); err != nil {
			return opts, exitCode(2, err)
		}
	}
	if c.IsSet("setting") {
		opts.Settings = []analysis.Setting{}
		for _, s := range c.StringSlice("setting") {
			if s != "none" {
				opts.Settings = append(opts.Settings, analysis.Setting{Conf: s})
			}
		}
	}
	return opts, nil
}

// goalFlag is --goal, shared by compare and analyze.
func goalFlag() cli.Flag {
	return &cli.StringFlag{Name: "goal", Value: "reserved", Usage: "what the recommendation optimises: " +
		"reserved (lowest peak reserved), fragmentation (lowest at_peak_pct), or fit:SIZE (e.g. fit:24GiB: " +
		"runs with no OOM on a device of SIZE, then the lowest cost in device calls and allocator time)"}
}

// SplitList splits a comma-separated flag value (for fragsim-fleet too).
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func runCompare(c *cli.Context) error {
	if c.NArg() > 1 {
		return exitCode(2, fmt.Errorf("compare: one TRACE at most, got %d arguments", c.NArg()))
	}
	opts, err := compareOptions(c)
	if err != nil {
		return err
	}
	in := c.Args().First()
	if err := checkPlots(c.String("out"), []string{in}, plot.ComparisonNames...); err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	if p := c.String("html"); p != "" {
		if err := outfile.Check(p, in); err != nil {
			return fmt.Errorf("compare: %w", err)
		}
	}
	open, name, err := traceSource(c, in)
	if err != nil {
		return err
	}
	prog := startProgress(c.App.ErrWriter, "compare", c.Bool("quiet"))
	opts.Name, opts.Progress = name, prog.replays
	if c.String("html") != "" {
		opts.MaxPoints = 2 * report.DefaultBuckets
	}
	cmp, err := analysis.Compare(open, opts)
	prog.done()
	if err != nil {
		return callError("compare", name, err)
	}
	if err := writeCompareFiles(c, open, cmp, opts); err != nil {
		return err
	}
	w := c.App.Writer
	switch {
	case c.Bool("json"):
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(cmp)
	case c.Bool("csv"):
		err = cmp.WriteCSV(w)
	default:
		err = cmp.WriteTable(w)
	}
	if err != nil {
		return err
	}
	if cmp.Truncated != "" { // a trace cut short: its events were shown; now fail
		return exitCode(2, fmt.Errorf("%s: %s (the figures cover the events before the cut)", name, cmp.Truncated))
	}
	return nil
}

// writeCompareFiles writes what --out and --html ask for: the plots, and
// the HTML report of the comparison.
func writeCompareFiles(c *cli.Context, open analysis.Opener, cmp *analysis.Comparison, opts analysis.CompareOptions) error {
	if dir := c.String("out"); dir != "" {
		paths, err := plot.WriteAll(dir, cmp, c.Args().First())
		if err != nil {
			return fmt.Errorf("writing plots: %w", err)
		}
		for _, p := range paths {
			fmt.Fprintf(c.App.ErrWriter, "fragsim: wrote %s\n", filepath.Clean(p))
		}
	}
	if p := c.String("html"); p != "" {
		rep, err := report.FromComparison(open, cmp, report.Options{Compare: opts})
		if err != nil {
			return fmt.Errorf("%s: report: %w", opts.Name, err)
		}
		return writeReport(c, rep, p, c.Args().First())
	}
	return nil
}

func fmtMillions(n int64) string {
	if n >= 1e6 {
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return strconv.FormatInt(n, 10)
}
