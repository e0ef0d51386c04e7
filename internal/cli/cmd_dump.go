package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/trace"
	"github.com/urfave/cli/v2"
)

func dumpCommand() *cli.Command {
	return &cli.Command{
		Name:      "dump",
		Usage:     "write a trace as text, one event per line",
		ArgsUsage: "TRACE",
		Description: "Writes the text twin of a binary trace: a `# fragsim text v1` line, a `header {json}`\n" +
			"line, `string N \"...\"` and `stack N func:file:line...` definitions just before their first\n" +
			"use, and one line per event, e.g.\n\n" +
			"  alloc t=1234 dev=0 stream=0x0 addr=0x7f0000000000 size=512 stack=3\n\n" +
			"`fragsim undump` turns the text back into the same trace. Use it to read a trace, to\n" +
			"cut or edit one by hand, and to attach one to a bug report. With -o the file appears\n" +
			"only once it is complete; it may not be the input.\n\n" + exitHelp,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "o", Usage: "write to `FILE` instead of stdout"},
		},
		Action: runDump,
	}
}

func runDump(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, fmt.Errorf("dump: want one TRACE argument, got %d", c.NArg()))
	}
	in := c.Args().First()
	if err := notDir(in); err != nil {
		return err
	}
	f, err := trace.Open(in)
	if err != nil {
		return readExit(err)
	}
	defer f.Close()
	var out io.Writer = c.App.Writer
	var of *outfile.File
	if path := c.String("o"); path != "" {
		if of, err = outfile.Create(path, in); err != nil {
			return exitCode(1, fmt.Errorf("dump: %w", err))
		}
		defer of.Abort()
		out = of
	}
	rerr := trace.WriteText(out, f.Reader)
	if rerr != nil && !errors.Is(rerr, trace.ErrTruncated) {
		return readExit(rerr)
	}
	if of != nil {
		// A trace cut short is still written, up to its cut: what was
		// valid is not lost.
		if err := of.Commit(); err != nil {
			return exitCode(1, fmt.Errorf("dump: %w", err))
		}
	}
	if rerr != nil {
		return readExit(rerr)
	}
	return nil
}
