package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/analysis/plot"
	"github.com/fragsim/fragsim/analysis/report"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/traces"
)

func compareCommand() *cli.Command {
	return &cli.Command{
		Name:      "compare",
		Usage:     "replay a trace under several allocator policies and settings, side by side, with a verdict",
		ArgsUsage: "[TRACE]",
		Description: "Replays TRACE (default: the built-in multi-agent trace) under each policy in parallel\n" +
			"and under PyTorch's own settings (expandable_segments, max_split_size_mb,\n" +
			"roundup_power2_divisions, garbage_collection_threshold, periodic empty_cache, and\n" +
			"combinations), prints the fragmentation views side by side, the setting recommended for\n" +
			"--goal (the same as analyze's), and the verdict: fragmentation before (caching, at peak\n" +
			"reserved) and after (the recommendation; ideal is the physical limit, never chosen).\n" +
			"Policies: " + strings.Join(allocator.Names(), ", ") + ".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "policies", Usage: "comma-separated policies to replay", Value: strings.Join(analysis.DefaultPolicies, ",")},
			&cli.StringFlag{Name: "conf", Usage: "PYTORCH_CUDA_ALLOC_CONF string for every policy (default: the trace's own settings)"},
			&cli.StringSliceFlag{Name: "setting", Usage: "a caching setting variant to consider, e.g. max_split_size_mb:128 (repeatable; replaces the default variants; 'none' for none)"},
			&cli.StringFlag{Name: "capacity", Usage: "device memory: bytes, a size (80GiB) or a preset (h200, a100-80g, ...); default: the trace's GPU"},
			goalFlag(),
			&cli.StringFlag{Name: "out", Usage: "write the plots (PNG and SVG) to this directory"},
			&cli.StringFlag{Name: "html", Usage: "also write the interactive HTML report (timeline, segment map, recommendation) to this file"},
			&cli.BoolFlag{Name: "json", Usage: "print the full comparison as JSON"},
			&cli.BoolFlag{Name: "csv", Usage: "print one CSV row per policy and setting"},
		},
		Action: runCompare,
	}
}

// traceSource resolves the TRACE argument: a file, or the built-in baseline
// when empty (said on stderr).
func traceSource(c *cli.Context, arg string) (analysis.Opener, string, error) {
	if arg != "" {
		if _, err := os.Stat(arg); err != nil {
			return nil, "", err
		}
		return replay.OpenFile(arg), arg, nil
	}
	name, data, err := traces.Baseline()
	if err != nil {
		return nil, "", fmt.Errorf("no TRACE given and %w", err)
	}
	fmt.Fprintf(c.App.ErrWriter, "fragsim: no TRACE given: using the built-in trace %s\n", name)
	return func() (*trace.Reader, io.Closer, error) {
		r, err := trace.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		return r, io.NopCloser(nil), nil
	}, name, nil
}

// goalFlag is --goal, shared by compare and analyze.
func goalFlag() cli.Flag {
	return &cli.StringFlag{Name: "goal", Value: "reserved", Usage: "what the recommendation optimises: " +
		"reserved (lowest peak reserved), fragmentation (lowest at_peak_pct), or fit:SIZE (e.g. fit:24GiB: " +
		"runs with no OOM on a device of SIZE, then the lowest cost in device calls and allocator time)"}
}

// checkPolicyConf builds every policy under conf, and every setting, on
// the trace's header, so that an unknown policy or a bad --conf is a
// usage error found before any replay.
func checkPolicyConf(open analysis.Opener, policies []string, conf string, settings ...analysis.Setting) error {
	r, cl, err := open()
	if err != nil {
		return nil // the replay reports the unreadable trace
	}
	h := r.Header()
	if cl != nil {
		cl.Close()
	}
	if len(policies) == 0 && len(settings) == 0 {
		policies = []string{"caching"}
	}
	for _, p := range policies {
		if _, err := allocator.NewFactory(p, conf, h); err != nil {
			return err
		}
	}
	for _, s := range settings {
		if _, err := allocator.NewFactory(s.Policy, s.Conf, h); err != nil {
			return fmt.Errorf("%s: %w", s.Conf, err)
		}
	}
	return nil
}

// splitList splits a comma-separated flag value.
func splitList(s string) []string {
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
	open, name, err := traceSource(c, c.Args().First())
	if err != nil {
		return err
	}
	opts := analysis.CompareOptions{Policies: splitList(c.String("policies")), Conf: c.String("conf"), Name: name}
	if opts.Goal, err = analysis.ParseGoal(c.String("goal")); err != nil {
		return exitCode(2, fmt.Errorf("compare: --goal: %w", err))
	}
	if err := checkPolicyConf(open, opts.Policies, opts.Conf); err != nil {
		return exitCode(2, fmt.Errorf("compare: %w", err))
	}
	if c.IsSet("setting") {
		opts.Settings = []analysis.Setting{}
		for _, s := range c.StringSlice("setting") {
			if s != "none" {
				opts.Settings = append(opts.Settings, analysis.Setting{Policy: "caching", Conf: s})
			}
		}
		if err := checkPolicyConf(open, nil, "", opts.Settings...); err != nil {
			return exitCode(2, fmt.Errorf("compare: --setting %w", err))
		}
	}
	if s := c.String("capacity"); s != "" {
		if opts.Config.CapacityBytes, err = replay.ParseCapacity(s); err != nil {
			return exitCode(2, err)
		}
	}
	prog := startProgress(c.App.ErrWriter, "compare", c.Bool("quiet"))
	opts.Progress = func(events int64, done, runs int) {
		prog.update("%d/%d replays done, %s events replayed", done, runs, fmtMillions(events))
	}
	if c.String("html") != "" {
		opts.MaxPoints = 2 * report.DefaultBuckets
	}
	cmp, err := analysis.Compare(open, opts)
	prog.done()
	if err != nil {
		if !strings.Contains(err.Error(), name) {
			err = fmt.Errorf("%s: %w", name, err)
		}
		return err
	}
	// A trace cut short: show what its events say, then fail.
	var cut error
	if cmp.Truncated != "" {
		cut = exitCode(2, fmt.Errorf("%s: %s (the figures cover the events before the cut)", name, cmp.Truncated))
	}
	w := c.App.Writer
	if c.String("out") != "" {
		paths, err := plot.WriteAll(c.String("out"), cmp)
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
			return fmt.Errorf("%s: report: %w", name, err)
		}
		if err := writeReport(c, rep, p, c.Args().First()); err != nil {
			return err
		}
	}
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
	return cut
}

func fmtMillions(n int64) string {
	if n >= 1e6 {
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return strconv.FormatInt(n, 10)
}
