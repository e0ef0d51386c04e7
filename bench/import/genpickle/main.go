// Command genpickle writes a synthetic PyTorch memory snapshot of any
// number of trace entries (see trace/pytorch/snapgen), for the import
// benchmarks.
//
//	genpickle -o OUT.pickle [-n ENTRIES] [-seed S] [-frames K]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fragsim/fragsim/trace/pytorch/snapgen"
)

func main() {
	out := flag.String("o", "", "output pickle (required)")
	n := flag.Int64("n", 1_000_000, "trace entries")
	seed := flag.Uint64("seed", 1, "random seed")
	frames := flag.Int("frames", 0, "Python stack frames per entry (0: no stacks)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "genpickle: -o OUT.pickle is required")
		os.Exit(2)
	}
	if err := write(*out, *n, *seed, *frames); err != nil {
		fmt.Fprintln(os.Stderr, "genpickle:", err)
		os.Exit(1)
	}
}

func write(path string, n int64, seed uint64, depth int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := snapgen.Write(f, n, seed, depth); err != nil {
		return err
	}
	return f.Close()
}
