package allocator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fragsim/fragsim/allocator/async"
	"github.com/fragsim/fragsim/allocator/bfc"
	"github.com/fragsim/fragsim/allocator/caching"
	"github.com/fragsim/fragsim/allocator/ideal"
	"github.com/fragsim/fragsim/allocator/paged"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// Facts are what the registry knows of a policy. PageBytes is that of the
// policy's default options (granularity_mb and page_mb change it).
type Facts struct {
	Name      string   // canonical name, as Names lists it
	Aliases   []string // other accepted names (async for pooled)
	Exact     bool     // replays PyTorch's own allocator exactly (caching, expandable)
	PageBytes uint64   // granularity of its device requests; 0 when it has none
	ErrorPct  float64  // modelled policies: measured error of peak reserved against real runs, in percent; 0 when exact or not measured
	Describe  string
}

// entry is one registered policy.
type entry struct {
	Facts
	build func(conf string, h *trace.Header) (driver.Factory, error)
}

// policies lists the policies in the order Names returns them.
var policies = []entry{
	{
		Facts: Facts{
			Name:  "caching",
			Exact: true,
			// Segments are whole multiples of kRoundLarge.
			PageBytes: caching.RoundLarge,
			Describe: "PyTorch's CUDA caching allocator, exactly (settings from the trace header; " +
				"--conf replaces them with a PYTORCH_CUDA_ALLOC_CONF string)",
		},
		build: func(conf string, h *trace.Header) (driver.Factory, error) {
			return cachingFactory(conf, h, false)
		},
	},
	{
		Facts: Facts{
			Name:  "expandable",
			Exact: true,
			// Pages of kSmallBuffer in the small pool; the large pool's
			// 20 MiB pages are whole multiples of it.
			PageBytes: caching.SmallBuffer,
			Describe: "PyTorch's caching allocator with expandable_segments:True " +
				"(other settings as for caching)",
		},
		build: func(conf string, h *trace.Header) (driver.Factory, error) {
			return cachingFactory(conf, h, true)
		},
	},
	{
		Facts: Facts{
			Name:      "pooled",
			Aliases:   []string{"async"},
			PageBytes: async.DefaultGranularity,
			// The largest error of the default model's peak reserved
			// against real backend:cudaMallocAsync runs of the four
			// workloads in bench/async (kv_decode_s1: -9.5%).
			ErrorPct: 9.5,
			Describe: "a documented model of CUDA's stream-ordered pool (cudaMallocAsync, " +
				"PyTorch's backend:cudaMallocAsync); alias async",
		},
		build: simple(async.ParseConf, async.New),
	},
	{
		// A model of another framework's allocator; its regions double in
		// size, so it has no fixed granularity. Not measured against real
		// runs: ErrorPct 0.
		Facts: Facts{
			Name: "bfc",
			Describe: "TensorFlow/XLA's best-fit-with-coalescing allocator (JAX's GPU default), " +
				"allow_growth behaviour",
		},
		build: simple(bfc.ParseConf, bfc.New),
	},
	{
		// The physical limit, not a model of a real allocator: no
		// granularity and nothing to measure against.
		Facts: Facts{
			Name:     "ideal",
			Describe: "the physical limit: reserved always equals the live requested bytes",
		},
		build: simple(ideal.ParseConf, ideal.New),
	},
	{
		// A model of a page-based KV-cache manager; PageBytes is the
		// default page_mb. Not measured against real runs: ErrorPct 0.
		Facts: Facts{
			Name:      "paged",
			PageBytes: paged.DefaultPageSize,
			Describe: "fixed-size pages, a request served by any free pages (as KV-cache " +
				"managers do); for workloads whose tensors can be split",
		},
		build: simple(paged.ParseConf, paged.New),
	},
}

// simple adapts a policy package whose options do not depend on the trace.
func simple[C any, P driver.Policy](parse func(string) (C, error), build func(driver.Device, C) (P, error)) func(string, *trace.Header) (driver.Factory, error) {
	return func(conf string, _ *trace.Header) (driver.Factory, error) {
		cfg, err := parse(conf)
		if err != nil {
			return nil, err
		}
		return func(dev driver.Device, _ *trace.Header) (driver.Policy, error) {
			p, err := build(dev, cfg)
			if err != nil {
				return nil, err
			}
			return p, nil
		}, nil
	}
}

// Names returns the policy names --policy accepts, in a stable order.
// Aliases (async for pooled) are accepted by NewFactory but not listed.
func Names() []string {
	names := make([]string, len(policies))
	for i, p := range policies {
		names[i] = p.Name
	}
	return names
}

// Lookup returns the facts of the named policy; name may be an alias and
// is matched without regard to case or surrounding space.
func Lookup(name string) (Facts, bool) {
	p, ok := lookup(name)
	if !ok {
		return Facts{}, false
	}
	return p.facts(), true
}

// All returns the facts of every policy, in Names order.
func All() []Facts {
	out := make([]Facts, len(policies))
	for i, p := range policies {
		out[i] = p.facts()
	}
	return out
}

// facts returns a copy of p's facts that the caller may change.
func (p entry) facts() Facts {
	f := p.Facts
	f.Aliases = slices.Clone(f.Aliases)
	return f
}

// Describe returns a one-line description of the named policy (or alias),
// or "" when the name is unknown.
func Describe(name string) string {
	p, ok := lookup(name)
	if !ok {
		return ""
	}
	return p.Describe
}

// NewFactory returns a factory that builds the named policy for the replay
// engine. Names are those of Names, or an alias (async = pooled).
//
// For caching and expandable, conf is a PYTORCH_CUDA_ALLOC_CONF string. When
// it is empty the settings recorded in the trace header h are used (PyTorch's
// defaults when h is nil or records none); when it is not, it replaces the
// recorded settings entirely: keys it does not set take PyTorch's defaults,
// not the recorded values. expandable forces expandable_segments:True.
//
// For the other policies conf holds that policy's own options as
// comma-separated key:value pairs (see each package's ParseConf); the keys of
// PYTORCH_CUDA_ALLOC_CONF are accepted there and ignored, so one --conf can
// be given to every policy of a comparison. Errors name the policy.
func NewFactory(name, conf string, h *trace.Header) (driver.Factory, error) {
	p, ok := lookup(name)
	if !ok {
		return nil, fmt.Errorf("unknown allocator policy %q (valid: %s)", name, validNames())
	}
	f, err := p.build(conf, h)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	return f, nil
}

func lookup(name string) (entry, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, p := range policies {
		if p.Name == name || slices.Contains(p.Aliases, name) {
			return p, true
		}
	}
	return entry{}, false
}

func validNames() string {
	names := Names()
	var al []string
	for _, p := range policies {
		for _, a := range p.Aliases {
			al = append(al, a+" = "+p.Name)
		}
	}
	s := strings.Join(names, ", ")
	if len(al) > 0 {
		s += "; aliases: " + strings.Join(al, ", ")
	}
	return s
}

// cachingFactory builds caching or expandable. The configuration is parsed
// once, here, so that a bad --conf fails before any replay starts.
func cachingFactory(conf string, h *trace.Header, expandable bool) (driver.Factory, error) {
	resolve := func(h *trace.Header) (caching.Config, error) {
		var cfg caching.Config
		var err error
		switch {
		case conf != "":
			cfg, err = caching.ParseConf(conf)
		case h != nil:
			cfg, err = caching.FromHeader(h)
		default:
			cfg = caching.DefaultConfig()
		}
		if err != nil {
			return cfg, err
		}
		if cfg.Backend == "cudaMallocAsync" {
			return cfg, fmt.Errorf("backend:cudaMallocAsync is not the caching allocator: replay it with --policy pooled")
		}
		if expandable {
			cfg.Expandable = true
		}
		return cfg, nil
	}
	cfg, err := resolve(h)
	if err != nil {
		return nil, err
	}
	fixed := conf != "" || h != nil
	return func(dev driver.Device, th *trace.Header) (driver.Policy, error) {
		c := cfg
		if !fixed && th != nil {
			// No header was known when the factory was made: take the
			// settings recorded in the trace being replayed.
			var err error
			if c, err = resolve(th); err != nil {
				return nil, err
			}
		}
		a, err := caching.New(dev, c)
		if err != nil {
			return nil, err
		}
		return a, nil
	}, nil
}
