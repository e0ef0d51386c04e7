package cli

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/synth"
	"github.com/urfave/cli/v2"
)

func synthCommand() *cli.Command {
	def := synth.DefaultConfig()
	return &cli.Command{
		Name:      "synth",
		Usage:     "generate a synthetic trace from a workload model (agents, models, request mix)",
		ArgsUsage: " ",
		Description: "Generates a trace without a GPU: agents, each with its own model copy (BERT-base\n" +
			"encoders by default; GPT-2 decoders with growing KV caches with --decode; training\n" +
			"steps with --train), serving requests of random batch sizes and sequence lengths,\n" +
			"their outputs held for a while. The same seed and options give the same trace.\n" +
			"The defaults are calibrated on a real multi-agent BERT trace.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the trace to `FILE`", Required: true},
			&cli.StringFlag{Name: "events", Usage: "target number of events (suffixes k, M, G)", Value: strconv.FormatInt(def.Events, 10)},
			&cli.Uint64Flag{Name: "seed", Usage: "random seed", Value: def.Seed},
			&cli.IntFlag{Name: "agents", Usage: "number of agents, each with its own model", Value: def.Agents},
			&cli.StringFlag{Name: "kinds", Usage: "agent kinds, assigned in turn: encode, decode, train", Value: "encode"},
			&cli.BoolFlag{Name: "decode", Usage: "decoding agents (GPT-2, KV cache growth); with --train, half of each"},
			&cli.BoolFlag{Name: "train", Usage: "training agents (activations kept for backward, gradients, AdamW)"},
			&cli.StringFlag{Name: "batch-sizes", Usage: "batch-size mix", Value: synthJoin(def.BatchSizes)},
			&cli.StringFlag{Name: "batch-weights", Usage: "relative frequency of each batch size (default: equal)"},
			&cli.IntFlag{Name: "seq-min", Usage: "shortest sequence (prompt) length", Value: def.SeqMin},
			&cli.IntFlag{Name: "seq-max", Usage: "longest sequence (prompt) length", Value: def.SeqMax},
			&cli.BoolFlag{Name: "seq-log", Usage: "draw sequence lengths log-uniformly (default: uniformly)", Value: def.SeqLog},
			&cli.IntFlag{Name: "decode-min", Usage: "fewest tokens a decode request generates", Value: def.DecodeMin},
			&cli.IntFlag{Name: "decode-max", Usage: "most tokens a decode request generates", Value: def.DecodeMax},
			&cli.Float64Flag{Name: "free-prob", Usage: "after each step, chance to free one held output (repeatedly)", Value: def.FreeProb},
			&cli.IntFlag{Name: "hold-cap", Usage: "most outputs held at once", Value: def.HoldCap},
			&cli.IntFlag{Name: "layers", Usage: "encoder layers (0: the model's own)"},
			&cli.BoolFlag{Name: "eager-attention", Usage: "materialise attention scores (false: fused attention)", Value: def.EagerAttention},
			&cli.BoolFlag{Name: "stream-per-agent", Usage: "run each agent on its own stream"},
			&cli.BoolFlag{Name: "no-stacks", Usage: "leave allocations without call stacks"},
			&cli.Int64Flag{Name: "think-us", Usage: "mean idle time between steps, microseconds", Value: def.ThinkNS / 1000},
			quietFlag(),
		},
		Action: runSynth,
	}
}

func runSynth(c *cli.Context) error {
	if c.NArg() > 0 {
		return exitCode(2, fmt.Errorf("synth: unexpected argument %q (the output goes in -o)", c.Args().First()))
	}
	cfg, err := synthConfig(c)
	if err != nil {
		return exitCode(2, fmt.Errorf("synth: %w", err))
	}
	if err := cfg.Validate(); err != nil {
		return exitCode(2, fmt.Errorf("synth: %w", err))
	}
	path := c.String("output")
	of, err := outfile.Create(path)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	defer of.Abort()
	fw, err := trace.NewWriter(of, cfg.Header())
	if err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	var sink trace.Sink = fw
	prog := startProgress(c.App.ErrWriter, "synth", c.Bool("quiet"))
	if prog.active() {
		sink = &synthProgress{Sink: fw, p: prog, target: cfg.Events, every: max(cfg.Events/100, 10_000)}
	}
	start := time.Now()
	st, genErr := synth.Generate(sink, cfg)
	prog.done()
	if genErr != nil {
		return fmt.Errorf("synth: %s: %w", path, genErr)
	}
	if err := fw.Close(); err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	if err := of.Commit(); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	wall := time.Since(start)
	var size int64
	if fi, err := os.Stat(path); err == nil {
		size = fi.Size()
	}
	w := c.App.Writer
	fmt.Fprintf(w, "wrote %s: %d events (%d allocs, %d frees, %d markers), %d requests, %d steps\n",
		path, st.Events, st.Allocs, st.Frees, st.Markers, st.Requests, st.Steps)
	fmt.Fprintf(w, "peak live: %s in %d blocks (weights %s, persistent %s)\n",
		synthBytes(st.PeakLiveBytes), st.PeakLiveBlocks, synthBytes(st.WeightBytes), synthBytes(st.PersistentBytes))
	perEvent := 0.0
	if st.Events > 0 {
		perEvent = float64(size) / float64(st.Events)
	}
	fmt.Fprintf(w, "duration: %.3f s of trace time; generated in %.2f s; file %s (%.2f bytes/event)\n",
		float64(st.DurationNS)/1e9, wall.Seconds(), synthBytes(uint64(size)), perEvent)
	return nil
}

// synthConfig turns the flags into a workload config.
func synthConfig(c *cli.Context) (synth.Config, error) {
	cfg := synth.DefaultConfig()
	n, err := synthCount(c.String("events"))
	if err != nil {
		return cfg, fmt.Errorf("--events: %w", err)
	}
	cfg.Events = n
	cfg.Seed = c.Uint64("seed")
	cfg.Agents = c.Int("agents")
	switch {
	case c.Bool("decode") && c.Bool("train"):
		cfg.Kinds = []synth.AgentKind{synth.Decode, synth.Train}
	case c.Bool("decode"):
		cfg.Kinds = []synth.AgentKind{synth.Decode}
	case c.Bool("train"):
		cfg.Kinds = []synth.AgentKind{synth.Train}
	default:
		cfg.Kinds = nil
		for _, name := range strings.Split(c.String("kinds"), ",") {
			k, err := synth.ParseAgentKind(strings.TrimSpace(name))
			if err != nil {
				return cfg, fmt.Errorf("--kinds: %w", err)
			}
			cfg.Kinds = append(cfg.Kinds, k)
		}
	}
	if cfg.BatchSizes, err = synthInts(c.String("batch-sizes")); err != nil {
		return cfg, fmt.Errorf("--batch-sizes: %w", err)
	}
	if s := c.String("batch-weights"); s != "" {
		for _, f := range strings.Split(s, ",") {
			w, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil {
				return cfg, fmt.Errorf("--batch-weights: %q is not a number", f)
			}
			cfg.BatchWeights = append(cfg.BatchWeights, w)
		}
	}
	cfg.SeqMin, cfg.SeqMax, cfg.SeqLog = c.Int("seq-min"), c.Int("seq-max"), c.Bool("seq-log")
	cfg.DecodeMin, cfg.DecodeMax = c.Int("decode-min"), c.Int("decode-max")
	cfg.FreeProb, cfg.HoldCap = c.Float64("free-prob"), c.Int("hold-cap")
	if l := c.Int("layers"); l != 0 {
		cfg.Encoder.Layers = l
		cfg.Decoder.Layers = l
	}
	cfg.EagerAttention = c.Bool("eager-attention")
	cfg.StreamPerAgent = c.Bool("stream-per-agent")
	cfg.Stacks = !c.Bool("no-stacks")
	cfg.ThinkNS = c.Int64("think-us") * 1000
	return cfg, nil
}

// synthCount parses a count with an optional k, M or G suffix (powers of ten).
func synthCount(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult, s = 1_000, s[:n-1]
		case 'm', 'M':
			mult, s = 1_000_000, s[:n-1]
		case 'g', 'G':
			mult, s = 1_000_000_000, s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > (1<<62)/mult {
		return 0, errors.New("want a positive count such as 1000000 or 10M")
	}
	return v * mult, nil
}

func synthInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func synthJoin(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func synthBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.2f %ciB", v, "KMGTP"[i])
}

// synthProgress passes events on and reports progress every so many.
type synthProgress struct {
	trace.Sink
	p      *progressLine
	n      int64
	target int64
	every  int64
}

func (s *synthProgress) WriteEvent(e trace.Event) error {
	s.n++
	if s.n%s.every == 0 {
		s.p.update("%d / %d events (%.0f%%)", s.n, s.target, 100*float64(s.n)/float64(s.target))
	}
	return s.Sink.WriteEvent(e)
}
