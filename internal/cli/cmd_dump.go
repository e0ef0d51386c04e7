package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func dumpCommand() *cli.Command {
	return &cli.Command{
		Name:  "dump",
		Usage: "(not built yet)",
		Action: func(*cli.Context) error {
			return errors.New("dump: not built yet")
		},
	}
}
