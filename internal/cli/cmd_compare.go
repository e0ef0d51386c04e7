package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func compareCommand() *cli.Command {
	return &cli.Command{
		Name:  "compare",
		Usage: "(not built yet)",
		Action: func(*cli.Context) error {
			return errors.New("compare: not built yet")
		},
	}
}
