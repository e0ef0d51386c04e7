// Package cli is the fragsim command line: flags to config, one library call, render.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

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
	app := &cli.App{
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
			reportCommand(),
			exportCommand(),
		},
		ExitErrHandler: func(*cli.Context, error) {},
	}
	// Flag parsing errors are usage errors: exit 2.
	usage := func(_ *cli.Context, err error, _ bool) error { return exitCode(2, err) }
	app.OnUsageError = usage
	for _, c := range app.Commands {
		c.OnUsageError = usage
	}
	return app
}

// Main runs the CLI and returns the process exit code.
//
// Exit codes: 0 success; 1 failure (bad or unreadable input, a failed
// replay); 2 usage errors (missing or unknown arguments and flags, bad flag
// values), and for replay, compare and info a trace cut short, whose
// figures cover the events before the cut; record exits with the
// program's own code.
func Main(args []string, stdout, stderr io.Writer) int {
	app := NewApp(stdout, stderr)
	if err := app.Run(interspersed(app, args)); err != nil {
		fmt.Fprintf(stderr, "fragsim: %v\n", err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		if strings.HasPrefix(err.Error(), "Required flag") { // urfave/cli's missing required flags
			return 2
		}
		return 1
	}
	return 0
}

// interspersed moves a command's flags that follow its positional arguments
// in front of them, so that `fragsim replay TRACE --json` works: urfave/cli
// stops parsing flags at the first positional argument. Everything after a
// "--" is left as it is (fragsim record -- python script.py --its-own-flags).
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 3 {
		return args
	}
	cmd := app.Command(args[1])
	if cmd == nil || cmd.SkipFlagParsing {
		return args
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	rest := args[2:]
	var flags, pos []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && takesValue[name] && i+1 < len(rest) {
			flags = append(flags, rest[i+1])
			i++
		}
	}
	out := append([]string{}, args[:2]...)
	out = append(out, flags...)
	return append(out, pos...)
}
