package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/trace"
	"github.com/urfave/cli/v2"
)

func undumpCommand() *cli.Command {
	return &cli.Command{
		Name:      "undump",
		Usage:     "turn a text trace (from fragsim dump) back into a binary trace",
		ArgsUsage: "TEXT",
		Description: "Parses the text twin written by `fragsim dump` (or by hand; `-` reads stdin) and writes\n" +
			"the binary trace to the -o file. Text dumped from a trace converts back to the same\n" +
			"events, strings and stacks. A syntax error names its line; the events before it are\n" +
			"still written, and the file is left without its end chunk, so that readers report it\n" +
			"as cut short. Any other error leaves a previous -o file as it was; -o may not be the input.\n\n" +
			"Exit status: 0 on success; 1 for a syntax error or any other error.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "o", Usage: "write the binary trace to `FILE`", Required: true},
		},
		Action: runUndump,
	}
}

func runUndump(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, fmt.Errorf("undump: want one TEXT argument, got %d", c.NArg()))
	}
	name := c.Args().First()
	var in io.Reader = os.Stdin
	if name != "-" {
		if err := notDir(name); err != nil {
			return err
		}
		f, err := os.Open(name)
		if err != nil {
			return exitCode(1, err)
		}
		defer f.Close()
		in = f
	}
	tr, err := trace.NewTextReader(in)
	if err != nil {
		return exitCode(1, fmt.Errorf("%s: %w", name, err))
	}
	of, err := outfile.Create(c.String("o"), name)
	if err != nil {
		return exitCode(1, fmt.Errorf("undump: %w", err))
	}
	defer of.Abort()
	w, err := trace.NewWriter(of, tr.Header())
	if err != nil {
		return exitCode(1, fmt.Errorf("undump: %s: %w", of.Name(), err))
	}
	if _, err := tr.CopyTo(w); err != nil {
		// The events before the syntax error are kept, without the end
		// chunk, so that readers report the trace as cut short there.
		if ferr := w.Flush(); ferr != nil {
			return exitCode(1, errors.Join(fmt.Errorf("%s: %w", name, err), ferr))
		}
		return exitCode(1, errors.Join(fmt.Errorf("%s: %w", name, err), of.Commit()))
	}
	if err := w.Close(); err != nil {
		return exitCode(1, fmt.Errorf("undump: %s: %w", of.Name(), err))
	}
	if err := of.Commit(); err != nil {
		return exitCode(1, fmt.Errorf("undump: %w", err))
	}
	return nil
}
