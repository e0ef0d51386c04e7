package cli

import (
	"encoding/json"
	"fmt"

	"github.com/fragsim/fragsim/cuda"
	"github.com/urfave/cli/v2"
)

func probeCommand() *cli.Command {
	return &cli.Command{
		Name:      "probe",
		Usage:     "show a live GPU's free memory and the largest block allocatable right now",
		ArgsUsage: " ",
		Description: "Asks the CUDA driver (libcuda.so.1, loaded at run time) for the device's free and\n" +
			"total memory, then finds the largest single block cuMemAlloc grants right now by\n" +
			"bisection in 2 MiB steps, freeing each block at once. When the largest block is\n" +
			"much smaller than the free memory, the device itself is fragmented (other processes'\n" +
			"allocations). The probe's own CUDA context takes a few hundred MiB.\n" +
			"Needs a fragsim built with cgo.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "device", Usage: "CUDA device `ORDINAL`", Value: 0},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON (keys: device, gpu_name, cuda_version, free_bytes, total_bytes, largest_block_bytes, attempts)"},
		},
		Action: runProbe,
	}
}

func runProbe(c *cli.Context) error {
	if c.NArg() > 0 {
		return exitCode(2, fmt.Errorf("probe: unexpected argument %q", c.Args().First()))
	}
	r, err := cuda.Probe(c.Int("device"))
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	w := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(w, "GPU %d: %s (CUDA %s)\n", r.Device, r.GPUName, r.CUDAVersion)
	fmt.Fprintf(w, "free           %s of %s\n", sizeText(r.FreeBytes), sizeText(r.TotalBytes))
	pct := 0.0
	if r.FreeBytes > 0 {
		pct = 100 * float64(r.LargestBlockBytes) / float64(r.FreeBytes)
	}
	fmt.Fprintf(w, "largest block  %s (%.1f%% of free; %d allocations to find it)\n", sizeText(r.LargestBlockBytes), pct, r.Attempts)
	return nil
}
