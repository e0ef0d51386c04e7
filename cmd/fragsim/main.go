// Command fragsim finds, explains and removes GPU memory fragmentation.
package main

import (
	"os"

	"github.com/fragsim/fragsim/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args, os.Stdout, os.Stderr))
}
