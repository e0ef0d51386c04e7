package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/fragsim/fragsim/cuda/record"
)

// attachCommand is the trace writer of a process that installs the
// recording allocator itself (the Python package's fragsim.recording()):
// hidden, since that process starts it.
func attachCommand() *cli.Command {
	return &cli.Command{
		Name:      "attach",
		Hidden:    true,
		Usage:     "write the trace of a process that records itself (started by fragsim.recording())",
		ArgsUsage: " ",
		Description: "Makes a record region, prints `region PATH` on stdout, and writes what process\n" +
			"--pid records into it (the process passes PATH to fragsim_hook.install through\n" +
			"$FRAGSIM_SHM) to -o FILE. Once the process closes its recording or ends, however it\n" +
			"ends, or its end of stdin closes, the trace is completed and renamed over FILE, and\n" +
			"the summary is printed on stdout as one JSON line. SIGINT is ignored: an interrupt\n" +
			"meant for the process must not end its trace writer.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the trace to `FILE`", Required: true},
			&cli.IntFlag{Name: "pid", Usage: "the recording process", Required: true},
		},
		Action: runAttach,
	}
}

func runAttach(c *cli.Context) error {
	// SIGPIPE too: once the process is gone, a write to its pipes must fail,
	// not end this writer before the trace is complete.
	signal.Ignore(syscall.SIGINT, syscall.SIGPIPE)
	gone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(gone)
	}()
	w := c.App.Writer
	s, err := record.Attach(record.AttachConfig{Output: c.String("output"), PID: c.Int("pid"), Gone: gone,
		Ready: func(region string) error {
			_, err := fmt.Fprintf(w, "region %s\n", region)
			return err
		}})
	if err != nil {
		if errors.Is(err, record.ErrNoTrace) {
			return exitCode(record.FailCode, fmt.Errorf("attach: %w", err))
		}
		return fmt.Errorf("attach: %w", err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
