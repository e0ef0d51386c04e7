package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fragsim/fragsim/trace"
	"github.com/urfave/cli/v2"
)

// exitHelp is the exit-code paragraph shared by the commands that read a trace.
const exitHelp = "Exit status: 0 on success; 2 when the file is cut short (what was read is still\n" +
	"shown or converted, and a warning on stderr says what was lost); 1 for any other error."

func infoCommand() *cli.Command {
	return &cli.Command{
		Name:      "info",
		Usage:     "summarize a trace: events by kind, devices, streams, duration, size, header",
		ArgsUsage: "TRACE",
		Description: "Reads the whole trace and prints how many events of each kind it holds, its devices\n" +
			"and streams, the time it spans, its file size and bytes per event, and the header's\n" +
			"metadata (GPU, versions, allocator settings, tags).\n\n" +
			"With --json the keys are stable: events, by_kind (counts keyed by kind name: alloc,\n" +
			"free_requested, free_completed, segment_alloc, segment_free, segment_map,\n" +
			"segment_unmap, oom, empty_cache, set_fraction, marker, snapshot), devices, streams,\n" +
			"duration_ns, file_bytes, bytes_per_event, header.\n\n" + exitHelp,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON"},
		},
		Action: runInfo,
	}
}

func runInfo(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, fmt.Errorf("info: want one TRACE argument, got %d", c.NArg()))
	}
	if err := notDir(c.Args().First()); err != nil {
		return err
	}
	f, err := trace.Open(c.Args().First())
	if err != nil {
		return readExit(err)
	}
	defer f.Close()
	s, rerr := trace.Summarize(f.Reader)
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			return err
		}
	} else if err := writeSummary(c.App.Writer, c.Args().First(), s); err != nil {
		return err
	}
	if rerr != nil {
		return readExit(rerr)
	}
	return nil
}

// notDir refuses a directory given where a file is read, with a message
// that says so (reading one fails with less helpful words).
func notDir(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return exitCode(1, fmt.Errorf("%s: is a directory, not a file", path))
	}
	return nil
}

// readExit gives a trace reading error its exit status: 2 for a file cut
// short, 1 for anything else.
func readExit(err error) error {
	if errors.Is(err, trace.ErrTruncated) {
		return exitCode(2, err)
	}
	return exitCode(1, err)
}

func writeSummary(w io.Writer, name string, s *trace.Summary) error {
	tw := tabwriter.NewWriter(trace.PrintableWriter(w), 0, 8, 2, ' ', 0)
	h := s.Header
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	row("trace", "%s", trace.Printable(name))
	prod := h.Producer
	if h.ProducerVersion != "" {
		prod += " (" + h.ProducerVersion + ")"
	}
	row("producer", "%s", trace.Printable(prod))
	if h.GPUName != "" || h.GPUTotalBytes != 0 {
		row("gpu", "%s %s", trace.Printable(h.GPUName), sizeText(h.GPUTotalBytes))
	}
	var vers []string
	for _, v := range [][2]string{{"torch", h.TorchVersion}, {"CUDA", h.CUDAVersion}, {"driver", h.DriverVersion}} {
		if v[1] != "" {
			vers = append(vers, v[0]+" "+v[1])
		}
	}
	if len(vers) > 0 {
		row("versions", "%s", trace.Printable(strings.Join(vers, ", ")))
	}
	if h.AllocConf != "" {
		row("alloc conf", "%s", trace.Printable(h.AllocConf))
	}
	if h.Initial != nil {
		row("initial", "%d segments live at the first event", len(h.Initial.Segments))
	}
	row("events", "%d over %s", s.Events, time.Duration(s.DurationNS))
	row("devices", "%s", joinIDs(s.Devices, "%d"))
	row("streams", "%s", joinIDs(s.Streams, "%#x"))
	row("file", "%s, %.2f bytes/event", sizeText(uint64(s.FileBytes)), s.BytesPerEvent)
	fmt.Fprintln(tw)
	row("kind", "events")
	for k := trace.Kind(1); int(k) < trace.NumKinds; k++ {
		if n := s.ByKind[k.String()]; n > 0 {
			row(k.String(), "%d", n)
		}
	}
	return tw.Flush()
}

func joinIDs[T any](ids []T, format string) string {
	if len(ids) == 0 {
		return "-"
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf(format, id)
	}
	return strings.Join(parts, " ")
}

// sizeText prints a byte count in binary units.
func sizeText(b uint64) string {
	const units = "KMGTPE"
	if b < 1024 {
		return fmt.Sprintf("%d B", b)
	}
	v, i := float64(b)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}
