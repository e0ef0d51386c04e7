//go:build !race

// Command fragsim-fleet analyses many traces at once on Apache Beam: the
// ranks of a job, the jobs of a fleet. `fragsim fleet` runs it; it is a
// binary of its own so that Beam's size and start-up stay out of every
// other command. Run by a Beam runner with --worker, it is that runner's
// worker (--worker_binary) and nothing else.
//
// It builds without the race detector only (every file is !race): under
// -race, Beam and its dependencies would compile a second time, about 230
// s on two cores, for code that is not the project's. `go test -race ./...`
// skips it; the fleet's own code (package fleet) runs under -race there,
// the README's fleet command runs this binary (internal/readme), and the
// pipeline's tests run under `go test ./...` and .ci/run's long pass.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	fcli "github.com/fragsim/fragsim/internal/cli"
)

func main() {
	if workerMode(os.Args[1:]) {
		// A runner started this binary as its worker: the harness runs
		// inside beam.Init and exits.
		flag.Parse()
		beam.Init()
		return
	}
	beam.Init()
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// workerMode reports whether the arguments are a Beam worker's (--worker).
func workerMode(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--worker" || a == "-worker" || strings.HasPrefix(a, "--worker=") || strings.HasPrefix(a, "-worker=") {
			return !strings.HasSuffix(a, "=false")
		}
	}
	return false
}

func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	if len(args) > 1 && app.Command(args[1]) == nil {
		// Flags may follow the inputs: fragsim fleet runs/ --out fleet/.
		args = append(args[:1:1], fcli.Intersperse(app.Flags, args[1:])...)
	}
	if err := app.Run(args); err != nil {
		code := exitCodeOf(err)
		fmt.Fprintf(stderr, "fragsim fleet: %v\n", err)
		return code
	}
	return 0
}
