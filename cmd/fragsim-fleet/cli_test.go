//go:build !race

package main

import (
	"io"

	"github.com/fragsim/fragsim/internal/cli"
)

// fcliMain runs a fragsim command in this process (fixtures).
func fcliMain(args []string, stderr io.Writer) int { return cli.Main(args, io.Discard, stderr) }
