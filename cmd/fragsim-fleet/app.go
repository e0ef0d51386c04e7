//go:build !race

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem"
	"github.com/urfave/cli/v2"

	// The runners and filesystems a fleet may use: Prism in-process,
	// universal (a Flink, Spark or Prism job server), Dataflow; local
	// files and gs://.
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/gcs"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/runners/dataflow"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"

	fcli "github.com/fragsim/fragsim/internal/cli"

	"github.com/fragsim/fragsim/fleet"
	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/trace"
)

// exitError carries an exit status: 2 for a usage error, 1 when inputs
// failed (the rest was written).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCodeOf(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}

func usage(format string, a ...any) error { return &exitError{2, fmt.Errorf(format, a...)} }

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:                      "fragsim fleet",
		DisableSliceFlagSeparator: true, // a --setting or --beam-option value keeps its commas
		HelpName:                  "fragsim fleet",
		Usage:                     "analyse many traces at once, the ranks of a job or the jobs of a fleet, on Apache Beam",
		UsageText: "fragsim fleet INPUT... --out DIR [options]\n" +
			"INPUT: a file, a directory searched for traces and snapshots, a glob, @list.txt, gs://...\n" +
			"fragsim fleet job-server [--port 8073]: a Prism job server for --runner universal",
		Version: fcli.VersionString(),
		Description: "Each input (a trace, a PyTorch snapshot plain, gzip'd or zstd'd, or an RMM log) goes\n" +
			"through the import and the comparison `fragsim compare` makes, with the same flags: its row\n" +
			"in traces.jsonl holds the recommendation compare --json gives. The rows are then combined\n" +
			"per candidate, job, stack and OOM class into fleet.json and settings.csv: the setting that\n" +
			"saves the most over the fleet without making any trace worse (and the best one if\n" +
			"regressions are allowed, naming them), each job's rank imbalance and outlier rank, the\n" +
			"stacks that strand the most memory, the OOM snapshots by class. fleet.html shows it.\n" +
			"Labels: the job is the parent directory and the rank is found in the file name (rank0,\n" +
			"rank-0, rank_0, _rank-N, snapshot_N.pickle) unless the trace's tags (job, rank) or\n" +
			"--label say otherwise. An input that cannot be read is a row with its error; the rest\n" +
			"completes, and the exit status is 1. The engine is Apache Beam: Prism in this process by\n" +
			"default; --runner universal --endpoint HOST:PORT submits to a Flink, Spark or Prism job\n" +
			"server (LOOPBACK workers: this process), --runner dataflow to Google Cloud Dataflow.",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: append(fcli.CompareFlags(),
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "write traces.jsonl, fleet.json, settings.csv and fleet.html into `DIR` (required)"},
			&cli.StringFlag{Name: "gpu-total", Usage: "the GPU's total memory (bytes, a size or a preset) for snapshots, which do not record it"},
			&cli.Float64Flag{Name: "memory-fraction", Usage: "the runs' per-process memory fraction, for snapshots"},
			&cli.StringFlag{Name: "label", Usage: "a `REGEX` with named groups job and rank, matched against each input's path, e.g. '(?P<job>[^/]+)/rank(?P<rank>\\d+)'"},
			&cli.IntFlag{Name: "stacks", Value: 5, Usage: "the stranding stacks kept for each trace"},
			&cli.BoolFlag{Name: "reports", Usage: "also write each trace's HTML report (fragsim report's) into DIR/reports/, linked from fleet.html (about 1 MB a trace)"},
			&cli.StringFlag{Name: "runner", Value: "prism", Usage: "the Beam runner: prism (in this process), universal (a job server at --endpoint), dataflow"},
			&cli.StringFlag{Name: "endpoint", Usage: "the job server's `HOST:PORT` (--runner universal)"},
			&cli.StringFlag{Name: "environment-type", Usage: "where the runner starts workers: LOOPBACK (this process; the default with --runner universal), PROCESS, DOCKER"},
			&cli.StringFlag{Name: "worker-binary", Usage: "the binary the runner's workers run (default: this one)"},
			&cli.StringSliceFlag{Name: "beam-option", Usage: "set Beam's pipeline option `KEY=VALUE` (repeatable), e.g. project=P, region=R, temp_location=gs://B/tmp for Dataflow"},
			&cli.StringFlag{Name: "temp", Usage: "where the pipeline writes its rows before the outputs are made (`URL`; default: a hidden directory in --out; gs://... on Dataflow)"},
			&cli.BoolFlag{Name: "json", Usage: "print fleet.json on standard output instead of the summary lines"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines on stderr"},
		),
		Action:   runFleet,
		Commands: []*cli.Command{jobServerCommand()},
		// A usage error is returned, with its exit status, not printed twice.
		OnUsageError: func(c *cli.Context, err error, _ bool) error { return usage("%v", err) },
	}
}

func runFleet(c *cli.Context) error {
	if c.NArg() == 0 {
		return usage("give at least one INPUT (a trace, a snapshot, a directory, a glob or @list.txt)")
	}
	dir := c.String("out")
	if dir == "" {
		return usage("--out DIR is required")
	}
	o := fleet.Options{Goal: c.String("goal"), Policies: fcli.SplitList(c.String("policies")), Conf: c.String("conf"),
		Capacity: c.String("capacity"), GPUTotal: c.String("gpu-total"), MemoryFraction: c.Float64("memory-fraction"),
		Label: c.String("label"), Stacks: c.Int("stacks")}
	if c.IsSet("setting") {
		o.Settings, o.SettingsSet = c.StringSlice("setting"), true
	}
	if err := o.Check(); err != nil {
		return usage("%v", err)
	}
	inputs, err := fleet.Expand(c.Args().Slice())
	if err != nil {
		return usage("%v", err)
	}
	if len(inputs) == 0 {
		return usage("no input found in %s", strings.Join(c.Args().Slice(), " "))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := fleet.CheckOutputs(dir, inputs); err != nil {
		return usage("%v", err)
	}
	if c.Bool("reports") {
		abs, err := filepath.Abs(filepath.Join(dir, fleet.ReportsSub))
		if err != nil {
			return err
		}
		o.ReportsDir = abs
	}
	if err := setBeamOptions(c); err != nil {
		return usage("%v", err)
	}
	quietBeam()
	start := time.Now()
	rows, f, err := execute(c, inputs, o, dir)
	if err != nil {
		return err
	}
	if err := fleet.WriteOutputs(dir, rows, f, inputs); err != nil {
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if err := enc.Encode(f); err != nil {
			return err
		}
	} else {
		for _, l := range f.Lines() {
			fmt.Fprintln(c.App.Writer, trace.Printable(l))
		}
	}
	var names []string
	for _, p := range fleet.OutputPaths(dir) {
		names = append(names, filepath.Clean(p))
	}
	fmt.Fprintf(c.App.ErrWriter, "fragsim fleet: wrote %s (%d inputs in %.1fs, runner %s)\n",
		strings.Join(names, ", "), len(inputs), time.Since(start).Seconds(), c.String("runner"))
	if f.Failed > 0 {
		return &exitError{1, fmt.Errorf("%d of %d inputs failed (their rows name the error); the others were analysed", f.Failed, f.Inputs)}
	}
	return nil
}

// execute runs the pipeline and reads back what it wrote: the rows, and
// the parts combined per key.
func execute(c *cli.Context, inputs []string, o fleet.Options, dir string) ([]fleet.Row, *fleet.Fleet, error) {
	ctx := context.Background()
	// Every temporary file of this process goes into one scratch directory,
	// removed at the end and on an interrupt: the scratch traces of the
	// analyses, and what Beam makes and leaves (an empty file a LOOPBACK
	// run creates in the temporary directory).
	sd, err := outfile.NewScratchDir("", "fragsim-fleet-*")
	if err != nil {
		return nil, nil, err
	}
	defer sd.Remove()
	if prev, ok := os.LookupEnv("TMPDIR"); ok {
		defer os.Setenv("TMPDIR", prev)
	} else {
		defer os.Unsetenv("TMPDIR")
	}
	os.Setenv("TMPDIR", sd.Path())
	temp := c.String("temp")
	var rowsPath, partsPath string
	if temp == "" {
		rs, err := outfile.NewScratch(dir, ".fleet-rows-*.jsonl")
		if err != nil {
			return nil, nil, err
		}
		defer rs.Remove()
		ps, err := outfile.NewScratch(dir, ".fleet-parts-*.jsonl")
		if err != nil {
			return nil, nil, err
		}
		defer ps.Remove()
		rowsPath, partsPath = rs.Path(), ps.Path()
	} else {
		stamp := fmt.Sprintf("fleet-%d-%d", os.Getpid(), time.Now().UnixNano())
		rowsPath, partsPath = joinURL(temp, stamp+"-rows.jsonl"), joinURL(temp, stamp+"-parts.jsonl")
	}
	p := buildPipeline(inputs, o, "", rowsPath, partsPath, c.Bool("quiet"))
	if _, err := beam.Run(ctx, c.String("runner"), p); err != nil {
		return nil, nil, fmt.Errorf("the pipeline failed on runner %s: %w", c.String("runner"), err)
	}
	rows, err := readLines[fleet.Row](ctx, rowsPath)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the pipeline's rows: %w", err)
	}
	parts, err := readLines[fleet.Part](ctx, partsPath)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the pipeline's aggregates: %w", err)
	}
	if len(rows) != len(inputs) && !anyScheme(inputs) {
		return nil, nil, fmt.Errorf("the pipeline gave %d rows for %d inputs", len(rows), len(inputs))
	}
	return rows, fleet.Summarize(parts, o.GoalOf()), nil
}

func anyScheme(inputs []string) bool {
	for _, in := range inputs {
		if fleet.HasScheme(in) {
			return true
		}
	}
	return false
}

// readLines reads a file of JSON values the pipeline wrote, local or
// remote.
func readLines[T any](ctx context.Context, path string) ([]T, error) {
	fs, err := filesystem.New(ctx, path)
	if err != nil {
		return nil, err
	}
	defer fs.Close()
	r, err := fs.OpenRead(ctx, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []T
	for dec := json.NewDecoder(r); ; {
		var v T
		if err := dec.Decode(&v); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
}

func joinURL(base, name string) string { return strings.TrimSuffix(base, "/") + "/" + name }

// setBeamOptions sets Beam's pipeline options, which are Go flags of the
// process, from the command's flags.
func setBeamOptions(c *cli.Context) error {
	set := func(k, v string) error {
		if flag.Lookup(k) == nil {
			return fmt.Errorf("--beam-option %s: Beam has no such option", k)
		}
		return flag.Set(k, v)
	}
	runner := c.String("runner")
	switch runner {
	case "prism", "universal", "dataflow":
	default:
		return fmt.Errorf("--runner %q: want prism, universal or dataflow", runner)
	}
	if runner == "universal" && c.String("endpoint") == "" {
		return fmt.Errorf("--runner universal needs --endpoint HOST:PORT (a Flink, Spark or Prism job server)")
	}
	env := c.String("environment-type")
	if env == "" && runner == "universal" {
		env = "LOOPBACK"
	}
	// Every one is set, to "" too: Beam keeps them in globals, and an
	// earlier pipeline of the same process (a test's) must not leave its
	// endpoint to this one (Prism in-process starts one when it is "").
	for k, v := range map[string]string{"endpoint": c.String("endpoint"), "environment_type": env,
		"worker_binary": c.String("worker-binary"), "job_name": "fragsim-fleet"} {
		if err := set(k, v); err != nil {
			return err
		}
	}
	for _, kv := range c.StringSlice("beam-option") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--beam-option %q: want KEY=VALUE", kv)
		}
		if err := set(strings.TrimLeft(k, "-"), v); err != nil {
			return err
		}
	}
	return nil
}

// quietBeam keeps Beam's and Prism's informational logs off the terminal:
// warnings and errors still show.
func quietBeam() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}
