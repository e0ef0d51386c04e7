package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func replayCommand() *cli.Command {
	return &cli.Command{
		Name:  "replay",
		Usage: "(not built yet)",
		Action: func(*cli.Context) error {
			return errors.New("replay: not built yet")
		},
	}
}
