package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func probeCommand() *cli.Command {
	return &cli.Command{
		Name:  "probe",
		Usage: "(not built yet)",
		Action: func(*cli.Context) error {
			return errors.New("probe: not built yet")
		},
	}
}
