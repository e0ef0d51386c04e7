package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func undumpCommand() *cli.Command {
	return &cli.Command{
		Name:  "undump",
		Usage: "(not built yet)",
		Action: func(*cli.Context) error {
			return errors.New("undump: not built yet")
		},
	}
}
