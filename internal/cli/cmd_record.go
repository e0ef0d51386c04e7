package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func recordCommand() *cli.Command {
	return &cli.Command{
		Name:  "record",
		Usage: "(not built yet)",
		Action: func(*cli.Context) error {
			return errors.New("record: not built yet")
		},
	}
}
