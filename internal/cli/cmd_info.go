package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func infoCommand() *cli.Command {
	return &cli.Command{
		Name:  "info",
		Usage: "(not built yet)",
		Action: func(*cli.Context) error {
			return errors.New("info: not built yet")
		},
	}
}
