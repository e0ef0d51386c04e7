package cli

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
)

func analyzeCommand() *cli.Command {
	return &cli.Command{
		Name:      "analyze",
		Usage:     "explain where a trace's fragmentation comes from and which setting removes it",
		ArgsUsage: "[TRACE]",
		Description: "Replays TRACE (default: the built-in multi-agent trace) under a policy and shows the\n" +
			"worst moments, the live blocks that keep split segments from being released (by\n" +
			"request size, stream, agent or model, and call stack), and the request sizes. Then\n" +
			"replays the trace under each setting of a sweep (expandable_segments,\n" +
			"max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold, emptying\n" +
			"the cache, padding requests), their combinations and the other policies, in parallel,\n" +
			"ranks them and recommends one for --goal, as compare does.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "policy", Usage: "policy whose fragmentation is explained", Value: "caching"},
			&cli.StringFlag{Name: "conf", Usage: "PYTORCH_CUDA_ALLOC_CONF string (default: the trace's own settings)"},
			&cli.StringFlag{Name: "capacity", Usage: "device memory: bytes, a size (80GiB) or a preset (h200, a100-80g, ...); default: the trace's GPU"},
			&cli.IntFlag{Name: "top", Usage: "worst moments to list", Value: 5},
			&cli.BoolFlag{Name: "no-advice", Usage: "skip the sweep of settings"},
			goalFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print the analysis as JSON"},
		},
		Action: runAnalyze,
	}
}

func runAnalyze(c *cli.Context) error {
	if c.NArg() > 1 {
		return exitCode(2, fmt.Errorf("analyze: one TRACE at most, got %d arguments", c.NArg()))
	}
	open, name, err := traceSource(c, c.Args().First())
	if err != nil {
		return err
	}
	opts := analysis.AnalyzeOptions{Policy: c.String("policy"), Conf: c.String("conf"), Top: c.Int("top"),
		NoAdvice: c.Bool("no-advice"), Name: name}
	if opts.Goal, err = analysis.ParseGoal(c.String("goal")); err != nil {
		return exitCode(2, fmt.Errorf("analyze: --goal: %w", err))
	}
	if err := checkPolicyConf(open, []string{opts.Policy}, opts.Conf); err != nil {
		return exitCode(2, fmt.Errorf("analyze: %w", err))
	}
	if s := c.String("capacity"); s != "" {
		if opts.Config.CapacityBytes, err = replay.ParseCapacity(s); err != nil {
			return exitCode(2, err)
		}
	}
	prog := startProgress(c.App.ErrWriter, "analyze", c.Bool("quiet"))
	opts.Progress = func(events int64, done, runs int) {
		prog.update("%d/%d replays done, %s events replayed", done, runs, fmtMillions(events))
	}
	a, err := analysis.Analyze(open, opts)
	prog.done()
	if err != nil {
		return err
	}
	// A trace cut short: show what its events say, then fail.
	var cut error
	if a.Truncated != "" {
		cut = exitCode(2, fmt.Errorf("%s: %s (the figures cover the events before the cut)", name, a.Truncated))
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		err = enc.Encode(a)
	} else {
		err = a.WriteText(c.App.Writer)
	}
	if err != nil {
		return err
	}
	return cut
}
