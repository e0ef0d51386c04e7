// Package cli is the fragsim command line: flags to config, one library call, render.
package cli

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/fragsim/fragsim/trace"
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

// actionError is an error a command's action returned. Main tells it from
// the errors urfave/cli returns before any action runs (a required flag
// missing), which are usage errors.
type actionError struct{ err error }

func (e *actionError) Error() string { return e.err.Error() }
func (e *actionError) Unwrap() error { return e.err }

// ranAction marks the errors of action as actionErrors, and applies the
// rules of every output flag first (outputFlags).
func ranAction(action cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		err := outputFlags(c)
		if err == nil {
			err = action(c)
		}
		if err != nil {
			return &actionError{err}
		}
		return nil
	}
}

// NewApp returns the fragsim application writing to stdout and stderr.
// Tests run the whole CLI in-process through it.
func NewApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name: "fragsim",
		// A repeatable flag's value is one value: a setting such as
		// expandable_segments:True,max_split_size_mb:128 or a tag's value
		// keeps its commas.
		DisableSliceFlagSeparator: true,
		Usage:                     "find, explain and remove GPU memory fragmentation",
		Description: "fragsim records the allocations of a PyTorch run (or imports the memory snapshot\n" +
			"PyTorch already writes), replays them offline through allocator policies (PyTorch's\n" +
			"caching allocator reproduced exactly, expandable segments, CUDA's stream-ordered\n" +
			"pool, ...) and tells how fragmented memory is, why, and which setting fixes it.\n\n" +
			"Start with `fragsim compare` (no argument: a built-in multi-agent trace).",
		Version:         version(),
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Commands: []*cli.Command{
			recordCommand(),
			attachCommand(),
			probeCommand(),
			importCommand(),
			infoCommand(),
			dumpCommand(),
			undumpCommand(),
			replayCommand(),
			compareCommand(),
			analyzeCommand(),
			explainCommand(),
			monitorCommand(),
			cohostCommand(),
			synthCommand(),
			reportCommand(),
			exportCommand(),
			fleetCommand(),
		},
		ExitErrHandler: func(*cli.Context, error) {},
	}
	// Flag parsing errors are usage errors: exit 2.
	usage := func(_ *cli.Context, err error, _ bool) error { return exitCode(2, err) }
	app.OnUsageError = usage
	for _, c := range app.Commands {
		c.OnUsageError = usage
		c.Action = ranAction(c.Action)
	}
	return app
}

// Main runs the CLI and returns the process exit code.
//
// Exit codes: 0 success; 1 failure (bad or unreadable input, a setting
// stored in a trace that no policy accepts, a failed replay, an output
// that cannot be written, stdout included, or that is one of the inputs);
// 2 usage errors (unknown commands, missing or unknown arguments and
// flags, bad flag values, an output named ""), and a trace or snapshot
// cut short, whose figures or conversion cover the events before the cut;
// 130 when a signal (outfile.Signals) interrupted the writing of an
// output file; record exits with the program's own code. The message of
// an error is printed escaped (trace.PrintableLines).
func Main(args []string, stdout, stderr io.Writer) int {
	out := &checkedWriter{w: stdout}
	app := NewApp(out, stderr)
	args, err := helpArgs(app, args)
	if err == nil {
		err = app.Run(interspersed(app, args))
		var ae *actionError
		var ee *exitError
		if err != nil && !errors.As(err, &ae) && !errors.As(err, &ee) {
			// urfave/cli refused the arguments before any action ran (a
			// required flag missing): a usage error.
			err = exitCode(2, err)
		}
	}
	if err == nil && out.err != nil {
		err = exitCode(1, fmt.Errorf("writing the output: %w", out.err))
	}
	var ce *childExit
	if errors.As(err, &ce) {
		return ce.code // the fleet binary said why
	}
	if err != nil {
		fmt.Fprintf(stderr, "fragsim: %s\n", trace.PrintableLines(err.Error()))
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		if code == 1 && errors.Is(err, trace.ErrTruncated) && len(args) > 1 && args[1] != "record" {
			// A trace cut short is exit 2 whichever command read it
			// (record exits with its program's code).
			code = 2
		}
		return code
	}
	return 0
}

// checkedWriter keeps the first error of the writes to stdout, so that a
// command whose output could not be written (a full disk, a closed pipe)
// exits 1 even where it did not check a print.
type checkedWriter struct {
	w   io.Writer
	err error
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// helpArgs turns `fragsim help CMD` into `fragsim CMD --help`, and refuses
// an unknown command with a usage error that suggests the nearest name.
func helpArgs(app *cli.App, args []string) ([]string, error) {
	if len(args) < 2 {
		return args, nil
	}
	name := args[1]
	if name == "help" {
		if len(args) == 2 {
			return []string{args[0], "--help"}, nil
		}
		name = args[2]
		if app.Command(name) == nil {
			return nil, unknownCommand(app, name)
		}
		return []string{args[0], name, "--help"}, nil
	}
	if strings.HasPrefix(name, "-") || app.Command(name) != nil {
		return args, nil
	}
	return nil, unknownCommand(app, name)
}

func unknownCommand(app *cli.App, name string) error {
	msg := fmt.Sprintf("unknown command %q", name)
	if near := nearest(app, name); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return exitCode(2, fmt.Errorf("%s (fragsim --help lists the commands)", msg))
}

// nearest returns the command whose name is closest to name by edit
// distance, when it is at most 2 edits or name begins it; "" otherwise.
func nearest(app *cli.App, name string) string {
	best, bestD := "", 3
	for _, c := range app.Commands {
		for _, n := range c.Names() {
			d := editDistance(strings.ToLower(name), n)
			if len(name) >= 2 && strings.HasPrefix(n, strings.ToLower(name)) {
				d = min(d, 1)
			}
			if d < bestD {
				best, bestD = c.Name, d
			}
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// version is Version and the commit the binary was built from, as the Go
// toolchain recorded it: "0.9.0 commit abc123def456" for a build of a
// checkout ("+modified" when it had uncommitted changes), "0.9.0" when no
// commit was stamped.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Version
	}
	v := Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if rev == "" {
		rev = Commit
	}
	if rev != "" {
		v += " commit " + rev[:min(len(rev), 12)] + modified
	}
	return v
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
	out := append([]string{}, args[:2]...)
	return append(out, Intersperse(cmd.Flags, args[2:])...)
}

// Intersperse puts the flags among args (of the given definitions) in
// front of the positional arguments, each flag with its value, as
// interspersed does for a command; everything from a "--" on stays last.
func Intersperse(defs []cli.Flag, rest []string) []string {
	takesValue := map[string]bool{}
	for _, f := range defs {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
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
	return append(flags, pos...)
}
