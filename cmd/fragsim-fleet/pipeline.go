//go:build !race

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"reflect"
	"sync/atomic"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/fragsim/fragsim/fleet"
	"github.com/fragsim/fragsim/outfile"
)

// The pipeline's functions are registered, so that a worker started by a
// runner (this binary, as --worker_binary) finds them by name.
func init() {
	register.DoFn3x1[context.Context, string, func(string), error](&matchFn{})
	register.DoFn3x0[context.Context, string, func(string)](&analyzeFn{})
	register.DoFn2x0[string, func(string, fleet.Part)](&partsFn{})
	register.Function2x1[fleet.Part, fleet.Part, fleet.Part](fleet.Merge)
	register.Function2x1[string, fleet.Part, string](encodePart)
	register.Emitter1[string]()
	register.Emitter2[string, fleet.Part]()
	t := reflect.TypeOf(fleet.Part{})
	beam.RegisterType(t)
	beam.RegisterCoder(t, encodeJSON, decodePartJSON)
}

func encodeJSON(p fleet.Part) ([]byte, error) { return json.Marshal(p) }

func decodePartJSON(b []byte) (fleet.Part, error) {
	var p fleet.Part
	err := json.Unmarshal(b, &p)
	return p, err
}

// buildPipeline is the fleet on Beam: match the inputs, reshuffle them so
// that large traces spread over the workers, analyse each in a DoFn,
// write the rows, and combine the rows' parts per key (a candidate, a
// job, a stack, an OOM class) into the aggregates, written beside them.
func buildPipeline(inputs []string, o fleet.Options, scratch, rowsPath, partsPath string, quiet bool) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	in := beam.CreateList(s, inputs)
	matched := beam.ParDo(s, &matchFn{}, in)
	spread := beam.Reshuffle(s, matched)
	rows := beam.ParDo(s, &analyzeFn{Opts: o, Scratch: scratch, Total: int64(len(inputs)), Quiet: quiet}, spread)
	textio.Write(s, rowsPath, rows)
	parts := beam.ParDo(s, &partsFn{Goal: o.Goal}, rows)
	merged := beam.CombinePerKey(s, fleet.Merge, parts)
	textio.Write(s, partsPath, beam.ParDo(s, encodePart, merged))
	return p
}

// matchFn expands an input with a scheme (gs://bucket/dir/*.pickle.gz)
// through Beam's filesystems; a local input, already expanded by the
// driver, passes as it is.
type matchFn struct{}

func (f *matchFn) ProcessElement(ctx context.Context, in string, emit func(string)) error {
	if !fleet.HasScheme(in) {
		emit(in)
		return nil
	}
	fs, err := filesystem.New(ctx, in)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	defer fs.Close()
	names, err := fs.List(ctx, in)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if len(names) == 0 {
		emit(in) // analysed, it becomes a row naming the missing input
	}
	for _, n := range names {
		emit(n)
	}
	return nil
}

// analyzed counts the rows of this process, for the progress line.
var analyzed atomic.Int64

// analyzeFn analyses one input into its row (JSON): fleet.Analyze, which
// turns any failure into a row with its error. A remote input is copied
// to a local scratch file first.
type analyzeFn struct {
	Opts    fleet.Options `json:"opts"`
	Scratch string        `json:"scratch"`
	Total   int64         `json:"total"`
	Quiet   bool          `json:"quiet"`
}

func (f *analyzeFn) ProcessElement(ctx context.Context, in string, emit func(string)) {
	var row fleet.Row
	if fleet.HasScheme(in) {
		row = f.analyzeRemote(ctx, in)
	} else {
		row = fleet.Analyze(in, f.Opts, f.Scratch)
	}
	b, err := json.Marshal(row)
	if err != nil { // a row is plain data; this would be a bug
		b, _ = json.Marshal(fleet.Row{Input: in, Error: "encoding its row: " + err.Error()})
	}
	n := analyzed.Add(1)
	if !f.Quiet {
		status := fmt.Sprintf("%.1fs", row.WallS)
		if row.Error != "" {
			status = "failed"
		}
		fmt.Fprintf(os.Stderr, "fragsim fleet: [%d/%d] %s (%s)\n", n, f.Total, in, status)
	}
	emit(string(b))
}

func (f *analyzeFn) analyzeRemote(ctx context.Context, in string) fleet.Row {
	local, cleanup, err := fetch(ctx, in, f.Scratch)
	if err != nil {
		l := fleet.Label(in, nil, nil)
		return fleet.Row{Input: in, Job: l.Job, Rank: l.Rank, Error: err.Error()}
	}
	defer cleanup()
	return fleet.AnalyzeFile(in, local, f.Opts, f.Scratch)
}

// fetch copies a remote file to a local scratch file that keeps its name's
// ending (the format is told by it, .csv for an RMM log).
func fetch(ctx context.Context, in, dir string) (string, func(), error) {
	fs, err := filesystem.New(ctx, in)
	if err != nil {
		return "", nil, err
	}
	defer fs.Close()
	r, err := fs.OpenRead(ctx, in)
	if err != nil {
		return "", nil, err
	}
	defer r.Close()
	scratch, err := outfile.NewScratch(dir, ".fragsim-fetch-*-"+path.Base(in))
	if err != nil {
		return "", nil, err
	}
	w, err := os.OpenFile(scratch.Path(), os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = io.Copy(w, r)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		scratch.Remove()
		return "", nil, fmt.Errorf("copying %s: %w", in, err)
	}
	return scratch.Path(), scratch.Remove, nil
}

// partsFn reduces a row to its keyed parts (fleet.PartsOf).
type partsFn struct {
	Goal string `json:"goal"`
}

func (f *partsFn) ProcessElement(row string, emit func(string, fleet.Part)) {
	var r fleet.Row
	if err := json.Unmarshal([]byte(row), &r); err != nil {
		r = fleet.Row{Input: "(a row that does not decode)", Error: err.Error()}
	}
	for _, p := range fleet.PartsOf(r, fleet.Options{Goal: f.Goal}.GoalOf()) {
		emit(p.Kind+"\x00"+p.Key, p)
	}
}

func encodePart(_ string, p fleet.Part) string {
	b, _ := json.Marshal(p)
	return string(b)
}
