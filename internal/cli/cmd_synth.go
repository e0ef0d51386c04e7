package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func synthCommand() *cli.Command {
	return &cli.Command{
		Name:  "synth",
		Usage: "(not built yet)",
		Action: func(*cli.Context) error {
			return errors.New("synth: not built yet")
		},
	}
}
