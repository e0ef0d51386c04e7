package cli

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/allocator"
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
			&cli.StringFlag{Name: "policy", Usage: "policy whose fragmentation is explained", Value: allocator.BaselineFacts().Name},
			&cli.StringFlag{Name: "conf", Usage: "PYTORCH_CUDA_ALLOC_CONF string (default: the trace's own settings)"},
			&cli.StringFlag{Name: "capacity", Usage: "device memory: bytes, a size (80GiB) or a preset (h200, a100-80g, ...); default: the trace's GPU"},
			&cli.IntFlag{Name: "top", Usage: "worst moments to list", Value: 5},
			&cli.BoolFlag{Name: "no-advice", Usage: "skip the sweep of settings"},
			goalFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print the analysis as JSON"},
			quietFlag(),
		},
		Action: runAnalyze,
	}
}

func runAnalyze(c *cli.Context) error {
	if c.NArg() > 1 {
		return exitCode(2, fmt.Errorf("analyze: one TRACE at most, got %d arguments", c.NArg()))
	}
	opts := analysis.AnalyzeOptions{Policy: c.String("policy"), Conf: c.String("conf"), Top: c.Int("top"),
		NoAdvice: c.Bool("no-advice")}
	var err error
	if opts.Goal, err = analysis.ParseGoal(c.String("goal")); err != nil {
		return exitCode(2, fmt.Errorf("analyze: --goal: %w", err))
	}
	if s := c.String("capacity"); s != "" {
		if opts.Config.CapacityBytes, err = replay.ParseCapacity(s); err != nil {
			return exitCode(2, err)
		}
	}
	open, name, err := traceSource(c, c.Args().First())
	if err != nil {
		return err
	}
	prog := startProgress(c.App.ErrWriter, "analyze", c.Bool("quiet"))
	opts.Name, opts.Progress = name, prog.replays
	a, err := analysis.Analyze(open, opts)
	prog.done()
	if err != nil {
		return callError("analyze", name, err)
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
	if a.Truncated != "" { // a trace cut short: its events were shown; now fail
		return exitCode(2, fmt.Errorf("%s: %s (the figures cover the events before the cut)", name, a.Truncated))
	}
	return nil
}
