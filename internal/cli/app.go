// Package cli is the fragsim command line: flags to config, one library call, render.
package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// exitError carries a process exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode returns an error that makes Main exit with code.
func exitCode(code int, err error) error { return &exitError{code: code, err: err} }

// NewApp returns the fragsim application writing to stdout and stderr.
// Tests run the whole CLI in-process through it.
func NewApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:  "fragsim",
		Usage: "find, explain and remove GPU memory fragmentation",
		Description: "fragsim records the allocations of a PyTorch run (or imports the memory snapshot\n" +
			"PyTorch already writes), replays them offline through allocator policies (PyTorch's\n" +
			"caching allocator reproduced exactly, expandable segments, CUDA's stream-ordered\n" +
			"pool, ...) and tells how fragmented memory is, why, and which setting fixes it.\n\n" +
			"Start with `fragsim compare` (no argument: a built-in multi-agent trace).",
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Commands: []*cli.Command{
			recordCommand(),
			probeCommand(),
			importCommand(),
			infoCommand(),
			dumpCommand(),
			undumpCommand(),
			replayCommand(),
			compareCommand(),
			analyzeCommand(),
			cohostCommand(),
			synthCommand(),
		},
		ExitErrHandler: func(*cli.Context, error) {},
	}
}

// Main runs the CLI and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	app := NewApp(stdout, stderr)
	if err := app.Run(args); err != nil {
		fmt.Fprintf(stderr, "fragsim: %v\n", err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}
