package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/traces"
)

// traceSource resolves the TRACE argument: a file, or the built-in baseline
// when empty (said on stderr). The opener's errors name the trace (see
// traceError).
func traceSource(c *cli.Context, arg string) (analysis.Opener, string, error) {
	if arg != "" {
		if _, err := os.Stat(arg); err != nil {
			return nil, "", err
		}
		return replay.OpenFile(arg), arg, nil
	}
	name, data, err := traces.Baseline()
	if err != nil {
		return nil, "", fmt.Errorf("no TRACE given and %w", err)
	}
	fmt.Fprintf(c.App.ErrWriter, "fragsim: no TRACE given: using the built-in trace %s\n", name)
	return func() (*trace.Reader, io.Closer, error) {
		r, err := trace.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, nil, &replay.TraceError{Name: name, Err: err}
		}
		return r, io.NopCloser(nil), nil
	}, name, nil
}

// traceError names the trace in an error about it, once. This is the one
// place the commands do so: an error of opening it names it already (the
// *fs.PathError of the file, or the *replay.TraceError of the opener),
// any other (a replay's, a report's) is named here.
func traceError(name string, err error) error {
	var pe *fs.PathError
	var te *replay.TraceError
	if err == nil || errors.As(err, &pe) || errors.As(err, &te) {
		return err
	}
	return &replay.TraceError{Name: name, Err: err}
}

// factoryError is a command's error for a policy the registry would not
// build for the trace name: a setting stored in the trace that cannot be
// used (a *trace.SettingError) is the trace's fault, exit 1, named; any
// other is the command line's (--policy, --conf), a usage error.
func factoryError(command, name string, err error) error {
	var se *trace.SettingError
	if errors.As(err, &se) {
		return &replay.TraceError{Name: name, Err: err}
	}
	return exitCode(2, fmt.Errorf("%s: %s: %w", command, name, err))
}

// callError is a command's error for what its library call returned: an
// option the library refused (an *analysis.OptionError: an unknown
// policy, a bad --conf or --setting) is a usage error, exit 2, with the
// flag named; any other is about the trace, and named (traceError).
func callError(command, name string, err error) error {
	var oe *analysis.OptionError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &oe) && oe.Option == analysis.OptionSetting:
		return exitCode(2, fmt.Errorf("%s: --setting %w", command, err))
	case errors.As(err, &oe):
		return exitCode(2, fmt.Errorf("%s: %w", command, err))
	}
	return traceError(name, err)
}
