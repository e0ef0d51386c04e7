package allocator

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/fragsim/fragsim/allocator/async"
	"github.com/fragsim/fragsim/allocator/bfc"
	"github.com/fragsim/fragsim/allocator/caching"
	"github.com/fragsim/fragsim/allocator/ideal"
	"github.com/fragsim/fragsim/allocator/paged"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// builtin are the policies this package registers, in the order Names
// returns them.
var builtin = []Entry{
	{
		Facts: Facts{
			Name:    "caching",
			Role:    Baseline,
			Default: true,
			Exact:   true,
			// Segments are whole multiples of kRoundLarge.
			PageBytes: caching.RoundLarge,
			// expandable_segments:True in --conf maps pages.
			MapPages: caching.MappedPages,
			Apply:    "PyTorch's default caching allocator",
			WallArm:  "native",
			Describe: "PyTorch's CUDA caching allocator, exactly (settings from the trace header; " +
				"--conf replaces them with a PYTORCH_CUDA_ALLOC_CONF string)",
		},
		Build: func(conf string, h *trace.Header) (driver.Factory, error) {
			return cachingFactory(conf, h, false)
		},
	},
	{
		Facts: Facts{
			Name:    "expandable",
			Default: true,
			Exact:   true,
			// Pages of kSmallBuffer in the small pool; the large pool's
			// 20 MiB pages are whole multiples of it.
			PageBytes: caching.SmallBuffer,
			MapPages:  caching.MappedPages,
			TorchConf: "expandable_segments:True",
			Apply:     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
			WallArm:   "expandable",
			Describe: "PyTorch's caching allocator with expandable_segments:True " +
				"(other settings as for caching)",
		},
		Build: func(conf string, h *trace.Header) (driver.Factory, error) {
			return cachingFactory(conf, h, true)
		},
	},
	{
		Facts: Facts{
			Name:      "pooled",
			Aliases:   []string{"async"},
			Default:   true,
			PageBytes: async.DefaultGranularity,
			MapPages:  async.MappedPages,
			// The largest error of the default model's peak reserved
			// against real backend:cudaMallocAsync runs of the four
			// workloads in bench/async (kv_decode_s1: -9.5%).
			ErrorPct:  9.5,
			TorchConf: "backend:cudaMallocAsync",
			Apply:     "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync",
			WallArm:   "async",
			Describe: "a documented model of CUDA's stream-ordered pool (cudaMallocAsync, " +
				"PyTorch's backend:cudaMallocAsync); alias async",
		},
		Build: simple(async.ParseConf, async.New),
	},
	{
		// A model of another framework's allocator; its regions double in
		// size, so it has no fixed granularity. Not measured against real
		// runs: ErrorPct 0.
		Facts: Facts{
			Name:    "bfc",
			Default: true,
			Apply:   pluggable,
			Describe: "TensorFlow/XLA's best-fit-with-coalescing allocator (JAX's GPU default), " +
				"allow_growth behaviour",
		},
		Build: simple(bfc.ParseConf, bfc.New),
	},
	{
		// The physical limit, not a model of a real allocator: no
		// granularity and nothing to measure against.
		Facts: Facts{
			Name:     "ideal",
			Role:     Limit,
			Default:  true,
			Apply:    "none: the physical limit",
			Describe: "the physical limit: reserved always equals the live requested bytes",
		},
		Build: simple(ideal.ParseConf, ideal.New),
	},
	{
		// A model of a page-based KV-cache manager; PageBytes is the
		// default page_mb. Not measured against real runs: ErrorPct 0.
		Facts: Facts{
			Name:      "paged",
			PageBytes: paged.DefaultPageSize,
			Apply:     pluggable,
			Describe: "fixed-size pages, a request served by any free pages (as KV-cache " +
				"managers do); for workloads whose tensors can be split",
		},
		Build: simple(paged.ParseConf, paged.New),
	},
}

// pluggable is how to get an allocator PyTorch does not have.
const pluggable = "a pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator)"

func init() {
	for _, e := range builtin {
		Register(e)
	}
}

// registry holds the registered policies in the order they were
// registered.
var registry struct {
	sync.RWMutex
	entries []Entry
}

// Register adds a policy to the registry and returns the function that
// removes it again. The policies of this package are registered through
// it, one entry each, in Names order; adding a policy is its package and
// one entry in builtin. A test registers a fake policy the same way, and
// removes it when done.
//
// Register panics when e breaks the registry's rules, which are the
// program's, not its input's: an empty name or no Build, a name or alias
// already taken, a second baseline or a second limit.
func Register(e Entry) (unregister func()) {
	e.Name = strings.ToLower(strings.TrimSpace(e.Name))
	e.Aliases = slices.Clone(e.Aliases)
	registry.Lock()
	defer registry.Unlock()
	if e.Name == "" || e.Build == nil {
		panic(fmt.Sprintf("allocator: Register(%q): a policy needs a name and a Build", e.Name))
	}
	for _, n := range append([]string{e.Name}, e.Aliases...) {
		if _, ok := lookupLocked(n); ok {
			panic(fmt.Sprintf("allocator: Register(%q): the name %q is taken", e.Name, n))
		}
	}
	for _, o := range registry.entries {
		if e.Role != Candidate && o.Role == e.Role {
			panic(fmt.Sprintf("allocator: Register(%q): %s is already the %s", e.Name, o.Name, e.Role))
		}
	}
	registry.entries = append(registry.entries, e)
	return func() {
		registry.Lock()
		defer registry.Unlock()
		registry.entries = slices.DeleteFunc(registry.entries, func(o Entry) bool { return o.Name == e.Name })
	}
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
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, len(registry.entries))
	for i, p := range registry.entries {
		names[i] = p.Name
	}
	return names
}

// Defaults returns the names of the policies a comparison replays when it
// is given none (those with Facts.Default), in Names order.
func Defaults() []string {
	var out []string
	for _, f := range All() {
		if f.Default {
			out = append(out, f.Name)
		}
	}
	return out
}

// Lookup returns the facts of the named policy; name may be an alias and
// is matched without regard to case or surrounding space.
func Lookup(name string) (Facts, bool) {
	registry.RLock()
	defer registry.RUnlock()
	p, ok := lookupLocked(name)
	if !ok {
		return Facts{}, false
	}
	return p.facts(), true
}

// BaselineFacts returns the facts of the baseline policy (Role Baseline):
// PyTorch's default allocator, which comparisons measure the others
// against and whose settings they vary.
func BaselineFacts() Facts {
	f, _ := ofRole(Baseline)
	return f
}

// LimitFacts returns the facts of the policy that stands for the
// physical limit (Role Limit), and whether one is registered.
func LimitFacts() (Facts, bool) { return ofRole(Limit) }

func ofRole(r Role) (Facts, bool) {
	for _, f := range All() {
		if f.Role == r {
			return f, true
		}
	}
	return Facts{}, false
}

// All returns the facts of every policy, in Names order.
func All() []Facts {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]Facts, len(registry.entries))
	for i, p := range registry.entries {
		out[i] = p.facts()
	}
	return out
}

// facts returns a copy of p's facts that the caller may change.
func (p Entry) facts() Facts {
	f := p.Facts
	f.Aliases = slices.Clone(f.Aliases)
	return f
}

// Describe returns a one-line description of the named policy (or alias),
// or "" when the name is unknown.
func Describe(name string) string {
	f, _ := Lookup(name)
	return f.Describe
}

// ErrUnknownPolicy is matched (errors.Is) by NewFactory's error for a
// name the registry does not hold.
var ErrUnknownPolicy = errors.New("unknown allocator policy")

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
	registry.RLock()
	p, ok := lookupLocked(name)
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (valid: %s)", ErrUnknownPolicy, name, validNames())
	}
	f, err := p.Build(conf, h)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	return f, nil
}

func lookupLocked(name string) (Entry, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, p := range registry.entries {
		if p.Name == name || slices.Contains(p.Aliases, name) {
			return p, true
		}
	}
	return Entry{}, false
}

func validNames() string {
	var names, al []string
	for _, p := range All() {
		names = append(names, p.Name)
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
