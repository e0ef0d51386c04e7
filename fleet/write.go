package fleet

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/fragsim/fragsim/outfile"
)

// Output names in the fleet's directory.
const (
	RowsFile     = "traces.jsonl"
	FleetFile    = "fleet.json"
	SettingsFile = "settings.csv"
	HTMLFile     = "fleet.html"
	ReportsDir   = "reports"
)

// OutputPaths are the files WriteOutputs writes in dir.
func OutputPaths(dir string) []string {
	return []string{filepath.Join(dir, RowsFile), filepath.Join(dir, FleetFile),
		filepath.Join(dir, SettingsFile), filepath.Join(dir, HTMLFile)}
}

// CheckOutputs applies the output rules to every file the fleet writes in
// dir before any work: none may be one of the inputs.
func CheckOutputs(dir string, inputs []string) error {
	for _, p := range OutputPaths(dir) {
		if err := outfile.Check(p, inputs...); err != nil {
			return err
		}
	}
	return nil
}

// SortRows orders rows by input, so that the outputs do not depend on the
// order an engine finished them in.
func SortRows(rows []Row) {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Input < rows[j].Input })
}

// WriteOutputs writes traces.jsonl (rows, sorted), fleet.json, settings.csv
// and fleet.html into dir, each through outfile: whole or not at all.
// inputs are the fleet's inputs, which no output may replace.
func WriteOutputs(dir string, rows []Row, f *Fleet, inputs []string) error {
	SortRows(rows)
	write := func(name string, fn func(io.Writer) error) error {
		return outfile.Write(filepath.Join(dir, name), inputs, func(w io.Writer) error {
			bw := bufio.NewWriterSize(w, 1<<16)
			if err := fn(bw); err != nil {
				return err
			}
			return bw.Flush()
		})
	}
	if err := write(RowsFile, func(w io.Writer) error { return WriteRows(w, rows) }); err != nil {
		return err
	}
	if err := write(FleetFile, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(f)
	}); err != nil {
		return err
	}
	if err := write(SettingsFile, f.WriteCSV); err != nil {
		return err
	}
	return write(HTMLFile, func(w io.Writer) error { return WriteHTML(w, f, rows) })
}

// WriteRows writes one JSON object a line.
func WriteRows(w io.Writer, rows []Row) error {
	enc := json.NewEncoder(w)
	for i := range rows {
		if err := enc.Encode(&rows[i]); err != nil {
			return fmt.Errorf("%s: %w", rows[i].Input, err)
		}
	}
	return nil
}

// CSVHeader is settings.csv's first line.
var CSVHeader = []string{"label", "setting", "env", "traces", "improved", "unchanged", "worse", "failed",
	"total_saving_bytes", "median_saving_bytes", "worst_regression_input", "worst_regression_saving_bytes",
	"recommended"}

// WriteCSV writes the per-candidate part of the fleet: one row a candidate,
// the largest total saving first; recommended is "fleet" for the fleet's
// recommendation and "with_regressions" for the best one with regressions.
func (f *Fleet) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, c := range f.Candidates {
		rec := ""
		switch {
		case f.Recommendation != nil && f.Recommendation.Label == c.Label:
			rec = "fleet"
		case f.WithRegressions != nil && f.WithRegressions.Label == c.Label:
			rec = "with_regressions"
		}
		wi, wb := "", ""
		if c.WorstRegression != nil {
			wi, wb = c.WorstRegression.Input, strconv.FormatInt(c.WorstRegression.SavingBytes, 10)
		}
		row := []string{c.Label, c.Setting, c.Env, strconv.Itoa(c.Traces), strconv.Itoa(c.Improved),
			strconv.Itoa(c.Unchanged), strconv.Itoa(c.Worse), strconv.Itoa(c.FailedRuns),
			strconv.FormatInt(c.TotalSavingBytes, 10), strconv.FormatInt(c.MedianSavingBytes, 10), wi, wb, rec}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
