package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"
)

// FleetBinary is the name of the fleet's own binary, which `fragsim
// fleet` runs: Beam, its engine, is kept out of this one (its size, its
// start-up), so that every other command starts as fast as before.
const FleetBinary = "fragsim-fleet"

// CompareFlags are the flags that say what a comparison replays and weighs
// (--policies, --conf, --setting, --capacity, --goal), for the fleet,
// which takes them as compare does.
func CompareFlags() []cli.Flag { return compareFlags() }

func fleetCommand() *cli.Command {
	return &cli.Command{
		Name:      "fleet",
		Usage:     "analyse many traces at once, the ranks of a job or the jobs of a fleet (runs " + FleetBinary + ", on Apache Beam)",
		ArgsUsage: "INPUT... --out DIR (see fragsim fleet --help)",
		Description: "Runs " + FleetBinary + ", found beside this binary, else on PATH, with the same\n" +
			"arguments: its --help says what it takes. Build it with\n" +
			"  go build -o DIR ./cmd/" + FleetBinary + "\n" +
			"into the directory of fragsim (the wheel does not carry it).",
		SkipFlagParsing: true,
		Action:          runFleet,
	}
}

// fleetPath finds the fleet binary: beside this executable, then on PATH.
func fleetPath() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), FleetBinary)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(FleetBinary); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("fleet: %s is not beside fragsim nor on PATH; build it with `go build -o \"$(dirname \"$(command -v fragsim)\")\" ./cmd/%s` from the source tree",
		FleetBinary, FleetBinary)
}

func runFleet(c *cli.Context) error {
	bin, err := fleetPath()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, c.Args().Slice()...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.App.Writer, c.App.ErrWriter
	// The terminal's interrupt reaches both processes; a signal sent to
	// this one alone is passed on, so that the fleet cleans up its outputs.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sig)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sig:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if code < 0 {
			code = 1
		}
		return &childExit{code}
	}
	return err
}

// childExit is the exit status of the fleet binary, which has said why
// itself: Main exits with it and prints nothing more.
type childExit struct{ code int }

func (e *childExit) Error() string {
	return fmt.Sprintf("%s exited with status %d", FleetBinary, e.code)
}
