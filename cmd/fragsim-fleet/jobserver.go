//go:build !race

package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"
	"github.com/urfave/cli/v2"
)

// jobServerCommand starts a Prism job server as a process of its own: the
// portable path a Flink or Spark job server takes, without building Prism
// apart. `fragsim fleet --runner universal --endpoint localhost:PORT`
// submits to it.
func jobServerCommand() *cli.Command {
	return &cli.Command{
		Name:  "job-server",
		Usage: "serve a Prism job server (Beam's portable job API) for --runner universal",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "port", Value: 8073, Usage: "the job service's port"},
			&cli.DurationFlag{Name: "idle-shutdown", Usage: "stop after this long without a job (0: never)"},
		},
		Action: func(c *cli.Context) error {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			sctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			idle := c.Duration("idle-shutdown")
			if idle <= 0 {
				idle = -1
			}
			if _, err := prism.CreateJobServer(ctx, prism.Options{Port: c.Int("port"), IdleShutdownTimeout: idle, CancelFn: cancel}); err != nil {
				return fmt.Errorf("job-server: %w", err)
			}
			fmt.Fprintf(c.App.ErrWriter, "fragsim fleet: Prism job server at localhost:%d\n", c.Int("port"))
			<-sctx.Done()
			time.Sleep(10 * time.Millisecond)
			return nil
		},
	}
}
