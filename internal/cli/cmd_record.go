package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fragsim/fragsim/cuda/record"
	"github.com/fragsim/fragsim/outfile"
	"github.com/urfave/cli/v2"
)

func recordCommand() *cli.Command {
	return &cli.Command{
		Name:      "record",
		Usage:     "run a PyTorch program and record every GPU allocation it makes",
		ArgsUsage: "-- PROGRAM [ARGS...]",
		Description: "Runs the program unchanged (e.g. `fragsim record -o run.fst -- python train.py`)\n" +
			"with fragsim's allocator installed as PyTorch's pluggable CUDA allocator before the\n" +
			"first CUDA allocation, through a sitecustomize module put first on PYTHONPATH.\n" +
			"Every allocation and free (size, device, stream, time, address), empty_cache(),\n" +
			"set_per_process_memory_fraction() and fragsim_marker calls go to the trace; the\n" +
			"memory itself comes from the CUDA driver's stream-ordered pool, and up to 256 MiB\n" +
			"of freed blocks of at most 16 MiB are kept to serve the next request of their size\n" +
			"on their stream without a driver call ($FRAGSIM_HOOK_CACHE_MB sets the limit, 0\n" +
			"turns it off; empty_cache() and an allocation the pool refuses give them back).\n" +
			"FRAGSIM_HOOK_STATS=1 prints the hook's own time per call at exit. The calls go\n" +
			"through memory fragsim shares with the program, so the trace keeps every call\n" +
			"however the program ends (exit, os._exit, a signal, a crash); it replaces FILE\n" +
			"only once complete. SIGTERM (and SIGINT not sent by the terminal) is passed to\n" +
			"the program.\n" +
			"The hook also samples the device's free memory at each pool growth and every\n" +
			"100 ms (device_mem events); the summary reports the memory outside the\n" +
			"program's allocator (total - free - reserved): the context at start, its peak\n" +
			"and growth. Under set_per_process_memory_fraction(), an allocation raises\n" +
			"torch.OutOfMemoryError where PyTorch's allocator would: from that call on, a model\n" +
			"of it decides (set the fraction before the first allocation: blocks allocated\n" +
			"before are not in the model, and fragsim says so).\n" +
			"FRAGSIM_METRICS_ADDR=[HOST]:PORT (e.g. :9400) serves fragsim.monitor's Prometheus\n" +
			"metrics at http://HOST:PORT/metrics while the program records: the model of\n" +
			"PyTorch's allocator then runs from the first allocation and gives the allocator's\n" +
			"figures; a scrape that finds the silent-OOM risk turned on says so on stderr.\n" +
			"Several processes (fragsim record -o run.fst -- torchrun --nproc-per-node 2 train.py):\n" +
			"the Python processes the program starts (torchrun's workers, those of\n" +
			"torch.multiprocessing.spawn, any subprocess) record too, each into a trace of its\n" +
			"own, from when they import torch. When one process used the GPU (made an\n" +
			"allocation), or none did, its trace is FILE, as when one process records. When\n" +
			"several did, or the one that did was given its rank by a launcher (RANK,\n" +
			"LOCAL_RANK or WORLD_SIZE set in its environment, and set otherwise or not at all\n" +
			"in fragsim's: torchrun --nproc-per-node 1), each writes FILE with .rankN before\n" +
			"the extension (run.rank0.fst, run.rank1.fst, ...), N its $RANK, else its\n" +
			"$LOCAL_RANK, else .pidN, N its pid (run.pid12345.fst; two processes of one rank:\n" +
			"run.rank0.pid12345.fst), with the header tags rank (none for .pidN), local_rank\n" +
			"and world_size (when it has them), pid and device (the devices it allocated on)\n" +
			"beside the --tag ones; FILE itself is not written, nor a trace for a process that\n" +
			"never allocated (the launcher). fragsim waits up to 10 s for recording processes\n" +
			"the program left running. The summary names every trace written.\n" +
			"fragsim exits with the program's exit code and prints a summary on stderr.\n" +
			"The hook library is --lib, else $FRAGSIM_HOOK_LIB, else libfragsim_hook.so next to\n" +
			"the fragsim binary or in build/ (cuda/build.sh builds it).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the trace to `FILE` (several processes on the GPU: one trace each, FILE with .rankN before its extension)", Value: "record.fst"},
			&cli.StringFlag{Name: "lib", Usage: "the hook library `PATH` (libfragsim_hook.so)"},
			&cli.StringSliceFlag{Name: "tag", Usage: "add `KEY=VALUE` to the trace header's tags (repeatable; e.g. workload=serve, seed=1)"},
		},
		Action: runRecord,
	}
}

func runRecord(c *cli.Context) error {
	if c.NArg() == 0 {
		return exitCode(2, errors.New("record: no program to run (fragsim record -o FILE -- python script.py ARGS...)"))
	}
	args := c.Args().Slice()
	// The hook library, the program and every argument that names a file
	// (its script) are inputs the trace may not replace.
	if err := outfile.Check(c.String("output"), append([]string{c.String("lib")}, args...)...); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	tags := map[string]string{}
	for _, kv := range c.StringSlice("tag") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return exitCode(2, fmt.Errorf("record: --tag %q: want KEY=VALUE", kv))
		}
		tags[k] = v
	}
	s, err := record.Run(record.Config{
		Tags:    tags,
		Output:  c.String("output"),
		HookLib: c.String("lib"),
		Args:    args,
		Stdin:   os.Stdin,
		Stdout:  c.App.Writer,
		Stderr:  c.App.ErrWriter,
		Inputs:  append([]string{c.String("lib")}, args...),
	})
	prog := filepath.Base(args[0])
	if err != nil {
		// The program's own code, or 1 when it ended well but fragsim failed.
		code := 1
		if s != nil && s.ExitCode != 0 {
			code = s.ExitCode
		}
		if errors.Is(err, record.ErrNoTrace) {
			why := "recording could not start (see above)"
			if s.ExitCode != record.FailCode {
				why = "the program never started recording (is it Python, run without -I, -E or -S?)"
			}
			return exitCode(code, fmt.Errorf("record: %w: %s; %s %s", err, why, prog, ended(s.ExitCode)))
		}
		if s != nil {
			if len(s.Traces) > 0 { // those written
				printRecordSummary(c.App.ErrWriter, c.String("output"), prog, s)
			}
			return exitCode(code, fmt.Errorf("record: %w (%s %s)", err, prog, ended(s.ExitCode)))
		}
		return exitCode(code, fmt.Errorf("record: %w", err))
	}
	printRecordSummary(c.App.ErrWriter, c.String("output"), prog, s)
	if s.ExitCode != 0 {
		return exitCode(s.ExitCode, fmt.Errorf("record: %s %s", prog, ended(s.ExitCode)))
	}
	return nil
}

// printRecordSummary prints the summary of a recording to FILE (output):
// that of its one trace, or one per trace written, and which they are.
func printRecordSummary(w io.Writer, output, prog string, s *record.Summary) {
	if len(s.Traces) == 0 {
		printTraceSummary(w, output, "", s)
		fmt.Fprintf(w, "fragsim record: %s %s; %s\n", prog, ended(s.ExitCode), completeness(s))
		if s.IdleProcesses > 0 {
			fmt.Fprintf(w, "fragsim record: %s written; %s\n", output, idle(s.IdleProcesses))
		}
		return
	}
	var names []string
	for _, t := range s.Traces {
		who := fmt.Sprintf("process %d", t.PID)
		if t.Rank != "" {
			who = fmt.Sprintf("rank %s (process %d)", t.Rank, t.PID)
		}
		printTraceSummary(w, t.Path, who, t)
		fmt.Fprintf(w, "fragsim record: %s: %s\n", t.Path, completeness(t))
		names = append(names, t.Path)
	}
	fmt.Fprintf(w, "fragsim record: %s %s\n", prog, ended(s.ExitCode))
	more := ""
	if s.IdleProcesses > 0 {
		more = "; " + idle(s.IdleProcesses)
	}
	n := fmt.Sprintf("%d traces", len(s.Traces))
	if len(s.Traces) == 1 {
		n = "1 trace"
	}
	fmt.Fprintf(w, "fragsim record: wrote %s, one per process that used the GPU, in place of %s: %s%s\n",
		n, output, strings.Join(names, ", "), more)
}

// idle says that n more processes recorded and allocated nothing.
func idle(n int) string {
	if n == 1 {
		return "1 more process recorded and allocated nothing: no trace for it"
	}
	return fmt.Sprintf("%d more processes recorded and allocated nothing: no trace for them", n)
}

// printTraceSummary prints the figures of one trace, written to path by
// who ("": the program).
func printTraceSummary(w io.Writer, path, who string, s *record.Summary) {
	if who != "" {
		dev := make([]string, len(s.Devices))
		for i, d := range s.Devices {
			dev[i] = fmt.Sprint(d)
		}
		who = fmt.Sprintf("%s on device %s: ", who, strings.Join(dev, ","))
	}
	fmt.Fprintf(w, "fragsim record: %s: %s%d allocs, %d frees, %d markers, %d OOMs (%d events) over %v\n",
		path, who, s.Allocs, s.Frees, s.Markers, s.OOMs, s.Events, s.Duration.Round(time.Microsecond))
	perEvent := 0.0
	if s.Events > 0 {
		perEvent = float64(s.FileBytes) / float64(s.Events)
	}
	fmt.Fprintf(w, "fragsim record: peak live %s requested; file %s (%.1f bytes/event)\n",
		sizeText(s.PeakLiveBytes), sizeText(uint64(s.FileBytes)), perEvent)
	if s.DeviceSamples > 0 {
		fmt.Fprintf(w, "fragsim record: outside memory on device %d (total - free - this process's pool, %d samples): %s at start (context), peak %s (growth %s), %s at the end\n",
			s.OutsideDevice, s.DeviceSamples, signedSize(s.OutsideStartBytes), signedSize(s.OutsidePeakBytes),
			signedSize(s.OutsidePeakBytes-s.OutsideStartBytes), signedSize(s.OutsideEndBytes))
	}
}

// ended says how the program ended, from its exit code (128+N: signal N).
func ended(code int) string {
	if code > 128 && code < 128+65 {
		sig := syscall.Signal(code - 128)
		return fmt.Sprintf("was killed by signal %d (%v)", code-128, sig)
	}
	return fmt.Sprintf("exited with code %d", code)
}

// completeness is the summary's one statement on what the trace holds.
func completeness(s *record.Summary) string {
	switch {
	case s.Truncated:
		return "the trace was cut short: it holds the events up to its last flush"
	case s.Missing > 0:
		return fmt.Sprintf("the trace lacks %d calls (no room in the record buffers, or a thread was mid-call when the program died)", s.Missing)
	case !s.Closed:
		return "it did not close its trace, so fragsim wrote every call the hook saw: the trace is complete"
	}
	return "the trace is complete"
}

// signedSize renders a byte count that can be negative (a sample taken as
// the pool changed).
func signedSize(b int64) string {
	if b < 0 {
		return "-" + sizeText(uint64(-b))
	}
	return sizeText(uint64(b))
}
