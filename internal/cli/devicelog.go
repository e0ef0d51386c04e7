package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/trace"
)

// mergeDeviceLog rewrites the trace at path with the device-memory samples
// merged in by time (trace.MergeDeviceSamples). It is a step after the
// import, so that neither importer needs to know of device logs; the
// trace is replaced only once the merged one is whole.
func mergeDeviceLog(path string, samples []trace.Event) (int, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	r, err := trace.NewReader(bufio.NewReaderSize(fh, 1<<20))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	var n int
	err = outfile.Write(path, nil, func(w io.Writer) error {
		tw, err := trace.NewWriter(w, r.Header())
		if err != nil {
			return err
		}
		if n, err = trace.MergeDeviceSamples(r, tw, samples); err != nil {
			return err
		}
		return tw.Close()
	})
	return n, err
}

// importDeviceLog merges samples into the imported trace at out and says
// how many it merged.
func importDeviceLog(log io.Writer, out string, samples []trace.Event) error {
	n, err := mergeDeviceLog(out, samples)
	if err != nil {
		return fmt.Errorf("import: --device-log: %w (the trace without the samples is kept in %s)", err, out)
	}
	fmt.Fprintf(log, "import: merged %d device-memory samples into %s", n, out)
	if left := len(samples) - n; left > 0 {
		fmt.Fprintf(log, " (%d after the trace's last event left out)", left)
	}
	fmt.Fprintln(log)
	return nil
}
