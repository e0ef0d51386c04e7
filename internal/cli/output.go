package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/outfile"
)

// outputNames are the names of the flags that name an output: a file
// (-o, --output, --html, and --out where it is -o's alias) or a directory
// of plots (--out of compare, replay and cohost).
var outputNames = map[string]bool{"o": true, "output": true, "out": true, "html": true}

// outputFlags applies the rules every output flag follows, before the
// command runs: an output given as "" is a usage error (exit 2); an
// output that is standard output ("-", /dev/stdout) takes it, and what the
// command would print there (a summary, a table) goes to stderr instead.
// Which files are inputs the output may not be is the command's to say
// (outfile.Check, then outfile.Create).
func outputFlags(c *cli.Context) error {
	for _, f := range c.Command.Flags {
		sf, ok := f.(*cli.StringFlag)
		if !ok || !outputNames[sf.Name] || !c.IsSet(sf.Name) {
			continue
		}
		v := c.String(sf.Name)
		if v == "" {
			return exitCode(2, fmt.Errorf("%s: %s: %w", c.Command.Name, flagName(sf.Name), outfile.ErrNoName))
		}
		if outfile.IsStdout(v) {
			c.App.Writer = c.App.ErrWriter
		}
	}
	return nil
}

// flagName is a flag as the command line gives it: -o, --out.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// checkPlots refuses, before any work, plots to dir that would replace one
// of inputs (through any name or link): the figures names, each as PNG
// and SVG. An empty dir asks for no plots; a directory that does not
// exist yet is made by the plots' writer.
func checkPlots(dir string, inputs []string, names ...string) error {
	if _, err := os.Stat(dir); dir == "" || errors.Is(err, fs.ErrNotExist) {
		return nil // no plots, or a directory the plots will make: nothing to replace
	}
	for _, n := range names {
		for _, ext := range []string{".png", ".svg"} {
			if err := outfile.Check(filepath.Join(dir, n+ext), inputs...); err != nil {
				return err
			}
		}
	}
	return nil
}
