package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func cohostCommand() *cli.Command {
	return &cli.Command{
		Name:  "cohost",
		Usage: "(not built yet)",
		Action: func(*cli.Context) error {
			return errors.New("cohost: not built yet")
		},
	}
}
