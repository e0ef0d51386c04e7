package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/analysis/plot"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

func replayCommand() *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "replay a trace through an allocator policy and measure fragmentation",
		ArgsUsage: "TRACE",
		Description: "Feeds the trace's requests to the policy, event by event, and reports what the\n" +
			"device would hold: peak and final reserved memory, every fragmentation view, OOMs, and,\n" +
			"when the trace carries the real allocator's device events and the policy reproduces it,\n" +
			"how faithfully (allocations at their recorded address, device events matched).\n\n" +
			"Policies: " + strings.Join(allocator.Names(), ", ") + ".\n" +
			"Capacity presets: " + strings.Join(replay.PresetNames(), ", ") + ".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "policy", Value: allocator.BaselineFacts().Name, Usage: "allocator policy (" + strings.Join(allocator.Names(), ", ") + ")"},
			&cli.StringFlag{Name: "conf", Usage: "PYTORCH_CUDA_ALLOC_CONF string (caching, expandable) or the policy's options; default: the trace's recorded settings"},
			&cli.StringFlag{Name: "capacity", Usage: "device memory: bytes, a size (24GiB, 80G) or a preset; default: the trace's GPU total, else unlimited"},
			&cli.Float64Flag{Name: "fraction", Usage: "per-process memory fraction (0 < F <= 1); default: the trace's"},
			&cli.StringFlag{Name: "outside", Usage: "device memory held outside the allocator (bytes or a size)"},
			&cli.Int64Flag{Name: "empty-cache-every", Usage: "inject empty_cache after every N allocations"},
			&cli.Float64Flag{Name: "defrag-threshold", Usage: "inject empty_cache whenever 100*(1-active/reserved) passes PCT"},
			&cli.BoolFlag{Name: "min-capacity", Usage: "also find the smallest capacity with no OOM (bisection to 2 MiB)"},
			&cli.BoolFlag{Name: "forecast", Usage: "also forecast silent OOMs: the largest request that can still be served over time, and the first moment it drops below the largest request made (JSON key forecast)"},
			&cli.StringFlag{Name: "out", Usage: "with --forecast, write the forecast plot (forecast.png, forecast.svg) to this directory"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			quietFlag(),
		},
		Action: runReplay,
	}
}

func runReplay(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, fmt.Errorf("replay: want one TRACE argument, got %d", c.NArg()))
	}
	path := c.Args().First()
	if err := checkPlots(c.String("out"), []string{path}, plot.ForecastName); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	var cfg replay.Config
	if s := c.String("capacity"); s != "" {
		v, err := replay.ParseCapacity(s)
		if err != nil {
			return exitCode(2, fmt.Errorf("replay: --capacity: %w", err))
		}
		cfg.CapacityBytes = v
	}
	if s := c.String("outside"); s != "" {
		v, err := replay.ParseCapacity(s)
		if err != nil {
			return exitCode(2, fmt.Errorf("replay: --outside: %w", err))
		}
		cfg.OutsideBytes = v
	}
	cfg.Fraction = c.Float64("fraction")
	cfg.EmptyCacheEvery = c.Int64("empty-cache-every")
	cfg.DefragThresholdPct = c.Float64("defrag-threshold")
	if err := cfg.Validate(); err != nil { // replay.Run checks it too; here, before the trace is read
		return configUsage(err)
	}

	open := replay.OpenFile(path)
	r, closer, err := open()
	if err != nil {
		return err
	}
	hdr := r.Header()
	f, err := allocator.NewFactory(c.String("policy"), c.String("conf"), hdr)
	if err != nil {
		closer.Close()
		return factoryError("replay", path, err)
	}
	var done func()
	cfg.Progress, done = replayProgress(c.App.ErrWriter, "replay", c.Bool("quiet"))
	var res *replay.Result
	var fc *replay.Forecast
	if c.Bool("forecast") || c.String("out") != "" {
		res, fc, err = replay.RunForecast(r, f, cfg, 0)
	} else {
		res, err = replay.Run(r, f, cfg)
	}
	done()
	closer.Close()
	var cut error // the trace was cut short: report what was read, then fail
	if err != nil {
		if res == nil || !errors.Is(err, trace.ErrTruncated) {
			return traceError(path, err)
		}
		cut = exitCode(2, fmt.Errorf("%s: %w (the figures cover the %d events read)", path, err, res.Events))
	}
	res.Conf = c.String("conf")
	// A state-only snapshot: its one moment is the state it holds.
	var state *analysis.StateReport
	if analysis.StateOnly(hdr, res.Events) {
		state = analysis.StateOf(hdr)
		state.ApplyState(res)
	}
	if c.Bool("min-capacity") && cut == nil {
		mc := cfg
		mc.Progress = nil
		v, err := replay.MinCapacity(open, f, mc)
		if err != nil {
			return fmt.Errorf("%s: min capacity: %w", path, err)
		}
		res.MinCapacityBytes = v
	}
	if dir := c.String("out"); dir != "" {
		title := "silent-OOM forecast, unlimited device"
		if cfg.CapacityBytes > 0 {
			title = "silent-OOM forecast on " + replay.FormatBytes(cfg.CapacityBytes)
		}
		if err := saveForecast(c.App.ErrWriter, dir, title, []plot.ForecastLine{{Name: res.Policy, Forecast: fc}}, []string{path}); err != nil {
			return traceError(path, err)
		}
	}
	w := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		var hint *fidelityHint
		if rule, try := replay.ExplainMismatch(res.Fidelity.FirstMismatch); rule != "" {
			hint = &fidelityHint{rule, try}
		}
		if err := enc.Encode(struct {
			*replay.Result
			Forecast     *replay.Forecast      `json:"forecast,omitempty"`
			FidelityHint *fidelityHint         `json:"fidelity_hint,omitempty"`
			State        *analysis.StateReport `json:"state,omitempty"`
		}{res, fc, hint, state}); err != nil {
			return err
		}
		return cut
	}
	w = trace.PrintableWriter(w)
	writeResult(w, res, hdr)
	if state != nil {
		fmt.Fprintln(w, state.Hint)
	}
	if fc != nil {
		writeForecast(w, fc)
	}
	return cut
}

// replayFlags names the flag of each replay.Config field a ConfigError
// can name.
var replayFlags = map[string]string{
	"Fraction":           "--fraction",
	"EmptyCacheEvery":    "--empty-cache-every",
	"DefragThresholdPct": "--defrag-threshold",
}

// configUsage is the usage error of a configuration replay refused (a
// *replay.ConfigError), told by its flags.
func configUsage(err error) error {
	var ce *replay.ConfigError
	if !errors.As(err, &ce) {
		return exitCode(2, err)
	}
	flags := make([]string, len(ce.Fields))
	for i, f := range ce.Fields {
		flags[i] = replayFlags[f]
	}
	what := strings.Join(flags, " and ")
	if ce.Value != "" {
		what += " " + ce.Value
	}
	return exitCode(2, fmt.Errorf("replay: %s: want %s", what, ce.Want))
}

// replayProgress returns a Progress callback for a replay's progress
// line (see startProgress) and the function that ends the line.
func replayProgress(w io.Writer, what string, quiet bool) (func(int64), func()) {
	p := startProgress(w, what, quiet)
	if !p.active() {
		return nil, func() {}
	}
	start := time.Now()
	return func(n int64) {
		p.update("%d events (%.1f M/s)", n, float64(n)/time.Since(start).Seconds()/1e6)
	}, p.done
}

func writeResult(w io.Writer, r *replay.Result, h *trace.Header) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	b := func(v uint64) string { return fmt.Sprintf("%s\t(%d B)", replay.FormatBytes(v), v) }
	fmt.Fprintf(tw, "policy\t%s\n", r.Policy)
	if r.Conf != "" {
		fmt.Fprintf(tw, "conf\t%s\n", trace.Printable(r.Conf))
	}
	fmt.Fprintf(tw, "events\t%d\n", r.Events)
	fmt.Fprintf(tw, "allocs\t%d\n", r.Allocs)
	fmt.Fprintf(tw, "peak reserved\t%s\n", b(r.PeakReservedBytes))
	fmt.Fprintf(tw, "final reserved\t%s\n", b(r.FinalReservedBytes))
	fmt.Fprintf(tw, "peak active\t%s\n", b(r.PeakActiveBytes))
	fmt.Fprintf(tw, "peak allocated\t%s\n", b(r.PeakAllocatedBytes))
	fmt.Fprintf(tw, "peak requested\t%s\n", b(r.PeakRequestedBytes))
	fmt.Fprintf(tw, "device allocs/frees\t%d / %d\n", r.DeviceAllocs, r.DeviceFrees)
	fmt.Fprintf(tw, "alloc retries\t%d\n", r.AllocRetries)
	fmt.Fprintf(tw, "OOMs\t%d\n", r.OOMs)
	fr := r.Fragmentation
	fmt.Fprintf(tw, "frag at peak\t%.2f%%\t(event %d)\n", fr.AtPeakPct, fr.PeakIndex)
	fmt.Fprintf(tw, "frag peak ratio\t%.2f%%\n", fr.PeakRatioPct)
	fmt.Fprintf(tw, "frag time-weighted\t%.2f%%\n", fr.TimeWeightedPct)
	fmt.Fprintf(tw, "external at peak\t%.2f%%\n", fr.ExternalPct)
	fmt.Fprintf(tw, "internal at peak\t%s\n", b(fr.InternalBytes))
	fmt.Fprintf(tw, "stranded at peak/max\t%s / %s\n", replay.FormatBytes(fr.StrandedBytes), replay.FormatBytes(fr.MaxStrandedBytes))
	fmt.Fprintf(tw, "overhead ratio\t%.3f\n", fr.OverheadRatio)
	if r.MinCapacityBytes > 0 {
		fmt.Fprintf(tw, "min capacity\t%s\n", b(r.MinCapacityBytes))
	}
	tw.Flush()
	for i, o := range r.OOMEvents {
		if i == 5 {
			fmt.Fprintf(w, "... %d more OOMs\n", r.OOMs-5)
			break
		}
		kind := "capacity"
		if o.Fragmentation {
			kind = "fragmentation"
		}
		fmt.Fprintf(w, "OOM at event %d: %s on stream %#x (%s): reserved %s, free cached %s, largest free %s, stranded %s\n",
			o.Index, replay.FormatBytes(o.SizeBytes), uint64(o.Stream), kind, replay.FormatBytes(o.ReservedBytes),
			replay.FormatBytes(o.FreeCachedBytes), replay.FormatBytes(o.LargestFreeBytes), replay.FormatBytes(o.StrandedBytes))
	}
	fd := r.Fidelity
	if fd.Checked {
		fmt.Fprintf(w, "fidelity: %d/%d allocs at recorded address, %d/%d device events matched\n",
			fd.AllocsAtRecordedAddress, fd.Allocs, fd.DeviceEventsMatched, fd.DeviceEvents)
		if fd.FirstMismatch != "" {
			fmt.Fprintf(w, "first mismatch: %s\n", fd.FirstMismatch)
			rule, try := replay.ExplainMismatch(fd.FirstMismatch)
			fmt.Fprintf(w, "rule that diverged first (likely): %s\ntry: %s\n", rule, try)
		}
	} else {
		fmt.Fprintf(w, "fidelity: not checked (%s)\n", fidelityReason(r, h))
	}
}

// fidelityHint is the JSON form of replay.ExplainMismatch.
type fidelityHint struct {
	Rule string `json:"rule"`
	Try  string `json:"try"`
}

func fidelityReason(r *replay.Result, h *trace.Header) string {
	if h == nil || (h.Producer != trace.ProducerPyTorch && h.Producer != trace.ProducerLive) {
		return "the trace was not recorded from PyTorch's allocator"
	}
	if r.Events == 0 && h.Initial != nil {
		return "the snapshot holds the allocator's state and no events"
	}
	if r.Fidelity.DeviceEvents == 0 && r.Fidelity.Allocs == 0 {
		return "the trace has no device events, or the policy or settings differ from the recorded ones"
	}
	return "the policy or settings differ from the recorded ones"
}

// writeForecast prints a silent-OOM forecast in two lines.
func writeForecast(w io.Writer, f *replay.Forecast) {
	if f.FirstShortfallIndex >= 0 {
		fmt.Fprintf(w, "forecast: headroom first fell below the largest request at event %d (%s < %s)\n",
			f.FirstShortfallIndex, replay.FormatBytes(f.ShortfallHeadroomBytes), replay.FormatBytes(f.ShortfallRequestBytes))
	} else {
		fmt.Fprintln(w, "forecast: the largest request made could be served at every event")
	}
	if f.Unlimited {
		fmt.Fprintln(w, "min headroom: unlimited (the device has no capacity: give --capacity, or import with --gpu-total)")
	} else {
		fmt.Fprintf(w, "min headroom: %s at event %d\n", replay.FormatBytes(f.MinHeadroomBytes), f.MinHeadroomIndex)
	}
	writeSilent(w, "forecast", f, false)
}
