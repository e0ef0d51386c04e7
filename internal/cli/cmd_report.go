package cli

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/analysis/report"
	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/replay"
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "write an interactive HTML report of a trace: timeline, segment map, where fragmentation comes from, the recommendation",
		ArgsUsage: "[TRACE]",
		Description: "Replays TRACE (default: the built-in multi-agent trace) as compare does and writes one\n" +
			"self-contained HTML file that opens offline in a browser: every policy's reserved, active\n" +
			"and requested memory on one zoomable timeline, the segments and blocks of a policy at\n" +
			"any captured moment (the worst one first), the free-block histogram, where the stranded\n" +
			"bytes come from, the policies and settings table and the recommendation.\n" +
			"Policies: " + strings.Join(allocator.Names(), ", ") + ".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "o", Aliases: []string{"out"}, Usage: "the HTML file to write", Required: true},
			&cli.StringFlag{Name: "policies", Usage: "comma-separated policies to replay", Value: strings.Join(analysis.DefaultPolicies, ",")},
			&cli.StringFlag{Name: "policy", Usage: "the policy whose segments and stranded bytes are shown", Value: "caching"},
			&cli.StringFlag{Name: "conf", Usage: "PYTORCH_CUDA_ALLOC_CONF string for every policy (default: the trace's own settings)"},
			&cli.StringSliceFlag{Name: "setting", Usage: "a caching setting variant to consider, e.g. max_split_size_mb:128 (repeatable; 'none' for none)"},
			&cli.StringFlag{Name: "capacity", Usage: "device memory: bytes, a size (80GiB) or a preset (h200, a100-80g, ...); default: the trace's GPU"},
			goalFlag(),
			&cli.IntFlag{Name: "moments", Usage: "evenly spaced moments whose segments are captured, besides the worst one", Value: 32},
		},
		Action: runReport,
	}
}

func runReport(c *cli.Context) error {
	if c.NArg() > 1 {
		return exitCode(2, fmt.Errorf("report: one TRACE at most, got %d arguments", c.NArg()))
	}
	if c.Int("moments") < 1 {
		return exitCode(2, fmt.Errorf("report: --moments must be at least 1, got %d", c.Int("moments")))
	}
	open, name, err := traceSource(c, c.Args().First())
	if err != nil {
		return err
	}
	opts := report.Options{Policy: c.String("policy"), Moments: c.Int("moments"),
		Compare: analysis.CompareOptions{Policies: splitList(c.String("policies")), Conf: c.String("conf"), Name: name}}
	if opts.Compare.Goal, err = analysis.ParseGoal(c.String("goal")); err != nil {
		return exitCode(2, fmt.Errorf("report: --goal: %w", err))
	}
	if err := checkPolicyConf(open, append(opts.Compare.Policies, opts.Policy), opts.Compare.Conf); err != nil {
		return exitCode(2, fmt.Errorf("report: %w", err))
	}
	if c.IsSet("setting") {
		opts.Compare.Settings = []analysis.Setting{}
		for _, s := range c.StringSlice("setting") {
			if s != "none" {
				opts.Compare.Settings = append(opts.Compare.Settings, analysis.Setting{Policy: "caching", Conf: s})
			}
		}
		if err := checkPolicyConf(open, nil, "", opts.Compare.Settings...); err != nil {
			return exitCode(2, fmt.Errorf("report: --setting %w", err))
		}
	}
	if s := c.String("capacity"); s != "" {
		if opts.Compare.Config.CapacityBytes, err = replay.ParseCapacity(s); err != nil {
			return exitCode(2, err)
		}
	}
	prog := startProgress(c.App.ErrWriter, "report", c.Bool("quiet"))
	opts.Compare.Progress = func(events int64, done, runs int) {
		prog.update("%d/%d replays done, %s events replayed", done, runs, fmtMillions(events))
	}
	rep, err := report.Build(open, opts)
	prog.done()
	if err != nil {
		if !strings.Contains(err.Error(), name) {
			err = fmt.Errorf("%s: %w", name, err)
		}
		return err
	}
	return writeReport(c, rep, c.String("o"), c.Args().First())
}

// writeReport writes the report's HTML to path and says so on stderr; a
// path that is the input trace is refused.
func writeReport(c *cli.Context, rep *report.Report, path, input string) error {
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		return err
	}
	if err := outfile.Write(path, []string{input}, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err }); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "fragsim: wrote %s (%.1f MB)\n", path, float64(buf.Len())/1e6)
	return nil
}
