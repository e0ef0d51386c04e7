package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func analyzeCommand() *cli.Command {
	return &cli.Command{
		Name:  "analyze",
		Usage: "(not built yet)",
		Action: func(*cli.Context) error {
			return errors.New("analyze: not built yet")
		},
	}
}
