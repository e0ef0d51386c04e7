package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func importCommand() *cli.Command {
	return &cli.Command{
		Name:  "import",
		Usage: "(not built yet)",
		Action: func(*cli.Context) error {
			return errors.New("import: not built yet")
		},
	}
}
