package cli

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis/report"
	"github.com/fragsim/fragsim/outfile"
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "write an interactive HTML report of a trace: timeline, segment map, where fragmentation comes from, the recommendation",
		ArgsUsage: "[TRACE]",
		Description: "Replays TRACE (default: the built-in multi-agent trace) as compare does and writes one\n" +
			"self-contained HTML file that opens offline in a browser: every policy's reserved, active\n" +
			"and requested memory on one zoomable timeline, the segments and blocks of a policy at\n" +
			"any captured moment (the worst one first), the free-block histogram, where the stranded\n" +
			"bytes come from, the policies and settings table and the recommendation.\n" +
			"Policies: " + strings.Join(allocator.Names(), ", ") + ".",
		Flags: append(compareFlags(),
			&cli.StringFlag{Name: "o", Aliases: []string{"out"}, Usage: "the HTML file to write", Required: true},
			&cli.StringFlag{Name: "policy", Usage: "the policy whose segments and stranded bytes are shown", Value: allocator.BaselineFacts().Name},
			&cli.IntFlag{Name: "moments", Usage: "evenly spaced moments whose segments are captured, besides the worst one", Value: 32},
			quietFlag(),
		),
		Action: runReport,
	}
}

func runReport(c *cli.Context) error {
	if c.NArg() > 1 {
		return exitCode(2, fmt.Errorf("report: one TRACE at most, got %d arguments", c.NArg()))
	}
	if c.Int("moments") < 1 {
		return exitCode(2, fmt.Errorf("report: --moments must be at least 1, got %d", c.Int("moments")))
	}
	co, err := compareOptions(c)
	if err != nil {
		return err
	}
	if err := outfile.Check(c.String("o"), c.Args().First()); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	open, name, err := traceSource(c, c.Args().First())
	if err != nil {
		return err
	}
	prog := startProgress(c.App.ErrWriter, "report", c.Bool("quiet"))
	co.Name, co.Progress = name, prog.replays
	rep, err := report.Build(open, report.Options{Policy: c.String("policy"), Moments: c.Int("moments"), Compare: co})
	prog.done()
	if err != nil {
		return callError("report", name, err)
	}
	return writeReport(c, rep, c.String("o"), c.Args().First())
}

// writeReport writes the report's HTML to path and says so on stderr; a
// path that is the input trace is refused.
func writeReport(c *cli.Context, rep *report.Report, path, input string) error {
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		return err
	}
	if err := outfile.Write(path, []string{input}, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err }); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "fragsim: wrote %s (%.1f MB)\n", path, float64(buf.Len())/1e6)
	return nil
}
