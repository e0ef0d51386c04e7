package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/trace"
)

// mergeDeviceLog writes to out the trace at src with the device-memory
// samples of the log named logName that lie in its time window merged in
// by time (trace.FitDeviceSamples, trace.MergeDeviceSamples). It is a
// step after the import, so that neither importer needs to know of device
// logs: the import writes src, a scratch file, and out is written once,
// from it, as any output is (package outfile; inputs are the files the
// command read). src is read twice, for its window and devices, then to
// copy it; out may be a pipe or standard output.
func mergeDeviceLog(src, out, logName string, samples []trace.Event, inputs ...string) (int, trace.DeviceFit, error) {
	var fit trace.DeviceFit
	sum, err := summarizeFile(src)
	if err != nil {
		return 0, fit, err
	}
	samples, fit, err = trace.FitDeviceSamples(samples, logName, sum.Devices, sum.FirstNS, sum.LastNS)
	if err != nil {
		return 0, fit, err
	}
	fh, err := os.Open(src)
	if err != nil {
		return 0, fit, err
	}
	defer fh.Close()
	r, err := trace.NewReader(bufio.NewReaderSize(fh, 1<<20))
	if err != nil {
		return 0, fit, fmt.Errorf("%s: %w", out, err)
	}
	var n int
	err = outfile.Write(out, inputs, func(w io.Writer) error {
		tw, err := trace.NewWriter(w, r.Header())
		if err != nil {
			return err
		}
		if n, err = trace.MergeDeviceSamples(r, tw, samples); err != nil {
			return err
		}
		return tw.Close()
	})
	fit.After += len(samples) - n
	return n, fit, err
}

// summarizeFile summarizes the trace at path.
func summarizeFile(path string) (*trace.Summary, error) {
	f, err := trace.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sum, err := trace.Summarize(f.Reader)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sum, nil
}

// importDeviceLog writes the imported trace at src, with the samples of
// the log logPath (given as --flag) merged in, to out, and says how many
// it merged, and how many it left out. inputs are the files the import
// read besides the log. On error nothing is written to out.
func importDeviceLog(log io.Writer, src, out, flag, logPath string, samples []trace.Event, inputs ...string) error {
	n, fit, err := mergeDeviceLog(src, out, logPath, samples, append(inputs, logPath)...)
	if err != nil {
		return fmt.Errorf("import: --%s: %w; nothing was written to %s", flag, err, out)
	}
	fmt.Fprintf(log, "import: merged %d device-memory samples into %s", n, out)
	var left []string
	if fit.Before > 0 {
		left = append(left, fmt.Sprintf("%d before the trace's first event", fit.Before))
	}
	if fit.After > 0 {
		left = append(left, fmt.Sprintf("%d after the trace's last event", fit.After))
	}
	if len(left) > 0 {
		fmt.Fprintf(log, " (%s left out)", strings.Join(left, " and "))
	}
	fmt.Fprintln(log)
	return nil
}
