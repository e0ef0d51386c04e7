package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis/plot"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
	"github.com/urfave/cli/v2"
)

func cohostCommand() *cli.Command {
	return &cli.Command{
		Name:      "cohost",
		Usage:     "replay several traces as processes sharing one GPU: OOMs, who held the memory, minimum capacity",
		ArgsUsage: "TRACE...",
		Description: "Each trace is a separate process with its own allocator on one device: what one\n" +
			"process caches, the others cannot get. The traces are merged by time (each starts at\n" +
			"its --offset; --scale stretches its clock). When a process is refused memory, its own\n" +
			"allocator releases its cache and retries, as alone; the others keep theirs. Each OOM\n" +
			"is reported with every other process's cached-free memory (reserved - active) and\n" +
			"releasable memory (in wholly free segments) at that moment, and is 'avoidable' when\n" +
			"the others' releasable memory would have covered the shortfall.\n\n" +
			"Each process also holds --context-overhead outside its allocator (CUDA context,\n" +
			"cuBLAS workspace; default 500MiB, typical on H100/H200).\n\n" +
			"The silent-OOM risk: memory outside the allocators (contexts, libraries, kernels\n" +
			"loaded lazily) grows while the caches hold the device; a process is at risk from\n" +
			"the first moment the device's free memory falls below --outside-reserve. Outside\n" +
			"memory comes from the traces' device_mem samples (import --device-log) or, without\n" +
			"them, from a model calibrated on H200 recordings (docs/outside-memory.md):\n" +
			"524MiB of context + 172MiB of libraries (or --context-overhead, when given) +\n" +
			"1.5MiB/s of lazily loaded kernels up to 128MiB.\n\n" +
			"The silent-OOM forecast: per process, the largest request it could still be served\n" +
			"(its largest free block, or what the device could give after it released its own\n" +
			"cache) over time, and the first moment it falls below the largest request the\n" +
			"process has made; --out DIR plots it (forecast.png, forecast.svg).\n\n" +
			"Policies: " + strings.Join(allocator.Names(), ", ") + ".\n" +
			"Capacity presets: " + strings.Join(replay.PresetNames(), ", ") + ".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "capacity", Usage: "device memory: bytes, a size (24GiB) or a preset; default: the first trace's GPU total, else unlimited"},
			&cli.StringFlag{Name: "policy", Value: "caching", Usage: "allocator policy, or one per trace separated by ','"},
			&cli.StringFlag{Name: "conf", Usage: "policy configuration, or one per trace separated by ';' (empty: the trace's recorded settings)"},
			&cli.StringFlag{Name: "offset", Usage: "start of each trace on the shared clock, separated by ',' (5s, 1.5m, 200ms; a bare number is seconds)"},
			&cli.BoolFlag{Name: "shared-clock", Usage: "keep the traces' recorded clocks (traces recorded at the same time) instead of starting each at its offset"},
			&cli.StringFlag{Name: "scale", Usage: "time scale of each trace, separated by ',' (2: twice as slow)"},
			&cli.StringFlag{Name: "context-overhead", Value: "500MiB", Usage: "memory each process holds outside its allocator"},
			&cli.StringFlag{Name: "outside-reserve", Usage: "free device memory a process's outside memory may still ask for; below it, a silent-OOM risk (default 172MiB)"},
			&cli.BoolFlag{Name: "min-capacity", Usage: "also find the smallest capacity on which every process completes (bisection to 2 MiB)"},
			&cli.StringFlag{Name: "out", Usage: "write the forecast plot (forecast.png, forecast.svg) to this directory"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			quietFlag(),
		},
		Action: runCohost,
	}
}

// perTrace splits a list flag into one value per trace: one value applies
// to all.
func perTrace(flag, s, sep string, n int) ([]string, error) {
	parts := strings.Split(s, sep)
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	switch len(parts) {
	case 1:
		out := make([]string, n)
		for i := range out {
			out[i] = parts[0]
		}
		return out, nil
	case n:
		return parts, nil
	}
	return nil, fmt.Errorf("cohost: --%s has %d values for %d traces: give one, or one per trace separated by %q", flag, len(parts), n, sep)
}

// parseOffset reads a duration (5s, 200ms) or a number of seconds, within
// the merged clock's range (int64 nanoseconds, about ±292 years).
func parseOffset(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		ns := math.Round(v * 1e9)
		if !(ns >= math.MinInt64 && ns < math.MaxInt64) {
			return 0, fmt.Errorf("bad offset %q: want a finite number of seconds within ±%.0f", s, float64(math.MaxInt64)/1e9)
		}
		return int64(ns), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad offset %q: want a duration like 5s or 200ms", s)
	}
	return int64(d), nil
}

func runCohost(c *cli.Context) error {
	paths := c.Args().Slice()
	if len(paths) == 0 {
		return exitCode(2, fmt.Errorf("cohost: want one or more TRACE arguments"))
	}
	n := len(paths)
	if n > replay.MaxCohostProcesses {
		return exitCode(2, fmt.Errorf("cohost: %d traces: at most %d processes share a device", n, replay.MaxCohostProcesses))
	}
	if err := checkPlots(c.String("out"), paths, plot.ForecastName); err != nil {
		return fmt.Errorf("cohost: %w", err)
	}
	policies, err := perTrace("policy", c.String("policy"), ",", n)
	if err != nil {
		return exitCode(2, err)
	}
	confs, err := perTrace("conf", c.String("conf"), ";", n)
	if err != nil {
		return exitCode(2, err)
	}
	offsets, err := perTrace("offset", c.String("offset"), ",", n)
	if err != nil {
		return exitCode(2, err)
	}
	scales, err := perTrace("scale", c.String("scale"), ",", n)
	if err != nil {
		return exitCode(2, err)
	}
	var cfg replay.CohostConfig
	if s := c.String("context-overhead"); s != "" {
		v, err := replay.ParseCapacity(s)
		if err != nil {
			return exitCode(2, fmt.Errorf("cohost: --context-overhead: %w", err))
		}
		cfg.ContextOverheadBytes = v
	}
	if s := c.String("capacity"); s != "" {
		v, err := replay.ParseCapacity(s)
		if err != nil {
			return exitCode(2, fmt.Errorf("cohost: --capacity: %w", err))
		}
		cfg.CapacityBytes = v
	}
	cfg.Forecast = true
	cfg.SharedClock = c.Bool("shared-clock")
	if cfg.Outside, err = outsideModel(c, "context-overhead", cfg.CapacityBytes); err != nil {
		return exitCode(2, fmt.Errorf("cohost: %w", err))
	}

	procs := make([]replay.Process, n)
	seen := map[string]int{}
	for i, path := range paths {
		open := replay.OpenFile(path)
		r, closer, err := open()
		if err != nil {
			return err
		}
		hdr := r.Header()
		closer.Close()
		if i == 0 && cfg.CapacityBytes == 0 && hdr != nil {
			cfg.CapacityBytes = hdr.GPUTotalBytes
		}
		f, err := allocator.NewFactory(policies[i], confs[i], hdr)
		if err != nil {
			return factoryError("cohost", path, err)
		}
		off, err := parseOffset(offsets[i])
		if err != nil {
			return exitCode(2, fmt.Errorf("cohost: --offset: %w", err))
		}
		scale := 1.0
		if scales[i] != "" {
			scale, err = strconv.ParseFloat(scales[i], 64)
			if err != nil || !(scale > 0) || math.IsInf(scale, 0) {
				return exitCode(2, fmt.Errorf("cohost: --scale %q: want a positive number", scales[i]))
			}
		}
		name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		seen[name]++
		if k := seen[name]; k > 1 {
			name = fmt.Sprintf("%s#%d", name, k)
		}
		procs[i] = replay.Process{Name: name, Open: open, Factory: f, Conf: confs[i], OffsetNS: off, Scale: scale}
	}

	var done func()
	cfg.Progress, done = replayProgress(c.App.ErrWriter, "cohost", c.Bool("quiet"))
	res, err := replay.Cohost(procs, cfg)
	done()
	if errors.Is(err, replay.ErrClock) {
		return exitCode(2, fmt.Errorf("cohost: %w (check --offset and --scale)", err))
	}
	if err != nil {
		return err
	}
	if c.Bool("min-capacity") {
		v, err := replay.CohostMinCapacity(procs, cfg)
		if err != nil {
			return fmt.Errorf("min capacity: %w", err)
		}
		res.MinCapacityBytes = v
	}
	if dir := c.String("out"); dir != "" {
		if err := writeForecastPlot(c.App.ErrWriter, dir, res, paths); err != nil {
			return err
		}
	}
	w := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	writeCohost(trace.PrintableWriter(w), res)
	return nil
}

// outsideModel returns the outside-memory model the flags give: the
// calibrated one; the flag ctxFlag, when given, replaces its context and
// libraries (the lazy growth stays), --outside-reserve its reserve (below
// the capacity, when there is one).
func outsideModel(c *cli.Context, ctxFlag string, capacity uint64) (replay.OutsideModel, error) {
	m := replay.DefaultOutsideModel()
	if c.IsSet(ctxFlag) {
		v, err := replay.ParseCapacity(c.String(ctxFlag))
		if err != nil {
			return m, fmt.Errorf("--%s: %w", ctxFlag, err)
		}
		// the figure given is all the process holds outside at its start
		m.ContextBytes, m.LibraryBytes, m.ContextOverrides = v, 0, true
	}
	if s := c.String("outside-reserve"); s != "" {
		v, err := replay.ParseCapacity(s)
		if err != nil {
			return m, fmt.Errorf("--outside-reserve: %w", err)
		}
		if capacity > 0 && v >= capacity {
			return m, fmt.Errorf("--outside-reserve %s: want less than the capacity %s", replay.FormatBytes(v), replay.FormatBytes(capacity))
		}
		m.ReserveBytes = v
	}
	return m, nil
}

// writeSilent prints a forecast's silent-OOM risk in one line, or how
// close the run came. With merged, the risk's time is on cohost's merged
// clock (seconds from the first event of all the processes), and said.
func writeSilent(w io.Writer, name string, f *replay.Forecast, merged bool) {
	if f == nil || f.OutsideSource == "" {
		return
	}
	if f.SilentRisk != "" {
		if merged && f.SilentRiskTimeNS >= 0 {
			fmt.Fprintf(w, "%s: at %.2f s: %s\n", name, float64(f.SilentRiskTimeNS)/1e9, f.SilentRisk)
		} else {
			fmt.Fprintf(w, "%s: %s\n", name, f.SilentRisk)
		}
		return
	}
	fmt.Fprintf(w, "%s: no silent-OOM risk: the device's free memory stayed at or above %s (outside memory from the %s; reserve %s)\n",
		name, replay.FormatBytes(f.SilentMinFreeBytes), f.OutsideSource, replay.FormatBytes(f.OutsideReserveBytes))
}

func writeForecastPlot(log io.Writer, dir string, res *replay.CohostResult, inputs []string) error {
	var lines []plot.ForecastLine
	for _, p := range res.Processes {
		lines = append(lines, plot.ForecastLine{Name: p.Name, Forecast: p.Forecast})
	}
	title := "silent-OOM forecast, unlimited device"
	if res.CapacityBytes > 0 {
		title = fmt.Sprintf("silent-OOM forecast on %s (%s context per process)",
			replay.FormatBytes(res.CapacityBytes), replay.FormatBytes(res.ContextOverheadBytes))
	}
	return saveForecast(log, dir, title, lines, inputs)
}

// saveForecast draws forecast lines into dir as forecast.png and
// forecast.svg, neither of which may be one of inputs.
func saveForecast(log io.Writer, dir, title string, lines []plot.ForecastLine, inputs []string) error {
	fig, err := plot.Forecast(title, lines)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	paths, err := fig.Save(dir, inputs...)
	if err != nil {
		return fmt.Errorf("writing plots: %w", err)
	}
	for _, p := range paths {
		fmt.Fprintf(log, "fragsim: wrote %s\n", filepath.Clean(p))
	}
	return nil
}

// maxShownOOMs is how many OOMs the human output details.
const maxShownOOMs = 5

func writeCohost(w io.Writer, r *replay.CohostResult) {
	capS := "unlimited"
	if r.CapacityBytes > 0 {
		capS = fmt.Sprintf("%s (%d B)", replay.FormatBytes(r.CapacityBytes), r.CapacityBytes)
	}
	fmt.Fprintf(w, "device %s, %d processes, %s context overhead each\n\n", capS, len(r.Processes), replay.FormatBytes(r.ContextOverheadBytes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "process\tpolicy\tevents\tpeak reserved\tfinal reserved\tfrag at peak\tfrag time-weighted\tOOMs (avoidable)\tblamed for\tfirst shortfall\tmin headroom")
	for _, p := range r.Processes {
		res := p.Result
		sf, mh := "none", "-"
		if f := p.Forecast; f != nil {
			if f.FirstShortfallIndex >= 0 {
				sf = fmt.Sprintf("event %d (%s < %s)", f.FirstShortfallIndex, replay.FormatBytes(f.ShortfallHeadroomBytes), replay.FormatBytes(f.ShortfallRequestBytes))
			}
			mh = replay.FormatBytes(f.MinHeadroomBytes)
			if f.Unlimited {
				mh = "unlimited"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.2f%%\t%.2f%%\t%d (%d)\t%d\t%s\t%s\n", trace.Printable(p.Name), res.Policy, res.Events,
			replay.FormatBytes(res.PeakReservedBytes), replay.FormatBytes(res.FinalReservedBytes),
			res.Fragmentation.AtPeakPct, res.Fragmentation.TimeWeightedPct, res.OOMs, p.AvoidableOOMs, p.BlamedOOMs, sf, mh)
	}
	t := r.Total
	fmt.Fprintf(tw, "total\t\t%d\t%s\t\t%.2f%%\t%.2f%%\t%d (%d)\t\t\t\n", t.Events, replay.FormatBytes(t.PeakReservedBytes),
		t.Fragmentation.AtPeakPct, t.Fragmentation.TimeWeightedPct, t.OOMs, t.AvoidableOOMs)
	tw.Flush()
	fmt.Fprintf(w, "\npeak used (reserved + contexts) %s; most cached-free memory held at once %s; external at peak %.2f%%\n",
		replay.FormatBytes(t.PeakUsedBytes), replay.FormatBytes(t.MaxCachedFreeBytes), t.Fragmentation.ExternalPct)
	if r.MinCapacityBytes > 0 {
		fmt.Fprintf(w, "min capacity: %s (%d B)\n", replay.FormatBytes(r.MinCapacityBytes), r.MinCapacityBytes)
	}
	for _, p := range r.Processes {
		writeSilent(w, trace.Printable(p.Name), p.Forecast, true)
	}
	if t.OOMs > 0 {
		fmt.Fprintf(w, "%d OOMs, %d avoidable had the other processes released their cache\n", t.OOMs, t.AvoidableOOMs)
	}
	for i, o := range r.OOMEvents {
		if i == maxShownOOMs {
			fmt.Fprintf(w, "... %d more OOMs (--json lists up to 1000)\n", t.OOMs-maxShownOOMs)
			break
		}
		fmt.Fprintf(w, "OOM: %s, event %d (merged %d, t=%.3fs): request %s", o.Name, o.OOM.Index, o.MergedIndex,
			float64(o.MergedTimeNS)/1e9, replay.FormatBytes(o.OOM.SizeBytes))
		if o.AskedBytes > 0 {
			fmt.Fprintf(w, ", asked the device %s, %s free: short by %s\n", replay.FormatBytes(o.AskedBytes),
				replay.FormatBytes(o.DeviceFreeBytes), replay.FormatBytes(o.ShortfallBytes))
		} else {
			fmt.Fprintf(w, ", refused by its own cap (memory fraction), not by the device\n")
		}
		fmt.Fprintf(w, "  own: reserved %s, cached free %s, largest free %s\n", replay.FormatBytes(o.OOM.ReservedBytes),
			replay.FormatBytes(o.OOM.FreeCachedBytes), replay.FormatBytes(o.OOM.LargestFreeBytes))
		for _, h := range o.Holders {
			fmt.Fprintf(w, "  %s: reserved %s, active %s, cached free %s (releasable %s)\n", h.Name,
				replay.FormatBytes(h.ReservedBytes), replay.FormatBytes(h.ActiveBytes), replay.FormatBytes(h.CachedFreeBytes),
				replay.FormatBytes(h.ReleasableBytes))
		}
		if o.Avoidable {
			var names []string
			for _, b := range o.Blamed {
				names = append(names, r.Processes[b].Name)
			}
			fmt.Fprintf(w, "  avoidable: blamed on %s (cache held while free)\n", strings.Join(names, ", "))
		} else if o.CachedFreeCovers {
			fmt.Fprintf(w, "  the others' cached-free memory covers it, but it is stranded in their segments: not releasable\n")
		} else {
			fmt.Fprintf(w, "  not avoidable by releasing the others' caches\n")
		}
	}
}
