package analysis

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// mapper is a policy made for TestNewPolicy: it maps every request on
// its own, rounded up to 2 MiB, and unmaps it when freed.
type mapper struct {
	dev  driver.Device
	live map[uint64]uint64
}

func (p *mapper) Name() string { return "mapper" }
func (p *mapper) Malloc(n uint64, s trace.StreamID) (driver.Block, error) {
	n = (max(n, 1) + 2<<20 - 1) &^ (2<<20 - 1)
	addr := p.dev.Reserve(n, s)
	if !p.dev.Map(addr, n) {
		return driver.Block{}, &driver.OOMError{SizeBytes: n, AllocBytes: n, Stream: s, Reason: "mapper: refused"}
	}
	p.live[addr] = n
	return driver.Block{Addr: addr, SizeBytes: n}, nil
}
func (p *mapper) FreeRequested(driver.Block) {}
func (p *mapper) FreeCompleted(b driver.Block) {
	if n, ok := p.live[b.Addr]; ok {
		delete(p.live, b.Addr)
		p.dev.Unmap(b.Addr, n)
	}
}
func (p *mapper) EmptyCache()         {}
func (p *mapper) Stats() driver.Stats { return driver.Stats{} }

// registerMapper registers mapper with the facts given, for the test, and
// returns what removes it (which the test's cleanup also does).
func registerMapper(t *testing.T, f allocator.Facts) (unregister func()) {
	t.Helper()
	var once sync.Once
	remove := allocator.Register(allocator.Entry{Facts: f,
		Build: func(string, *trace.Header) (driver.Factory, error) {
			return func(dev driver.Device, _ *trace.Header) (driver.Policy, error) {
				return &mapper{dev: dev, live: map[uint64]uint64{}}, nil
			}, nil
		}})
	unregister = func() { once.Do(remove) }
	t.Cleanup(unregister)
	return unregister
}

// TestNewPolicy shows that adding a policy is its package and one
// registry entry: a policy registered through allocator.Register, as the
// registry's own entries are, goes through Compare and Decide with its
// facts used: how to apply it, how its device calls are priced, and how
// far it is trusted. The analysis names no policy (see internal/lint).
func TestNewPolicy(t *testing.T) {
	var pages atomic.Int64
	facts := allocator.Facts{
		Name: "mapper", Aliases: []string{"mapping"}, Describe: "maps every request on its own",
		ErrorPct: 50, TorchConf: "backend:mapper", Apply: "load the mapper with CUDAPluggableAllocator",
		MapPages: func(n uint64) uint64 { p := n >> 20; pages.Add(int64(p)); return p }, // 1 MiB pages
	}
	unregister := registerMapper(t, facts)
	base := allocator.BaselineFacts().Name
	data := genTrace(t, 20000, 7)
	c, err := Compare(opener(data), CompareOptions{Policies: []string{base, "mapping"}, Settings: []Setting{}})
	if err != nil {
		t.Fatal(err)
	}
	m, b := c.Run("mapping"), c.Run(base)
	if !m.OK() || !b.OK() {
		t.Fatalf("runs: %+v, %+v", m, b)
	}
	if m.Apply != facts.Apply {
		t.Errorf("apply %q, want the registry's %q", m.Apply, facts.Apply)
	}
	if m.Cost == nil || m.Cost.Pages == 0 || m.Cost.Pages != pages.Load() || !m.Cost.Mapped {
		t.Errorf("cost %+v, want the %d pages of the policy's MapPages", m.Cost, pages.Load())
	}
	if m.Result.PeakReservedBytes >= b.Result.PeakReservedBytes {
		t.Fatalf("mapper peaks at %d bytes, the baseline at %d: the test needs the mapper lower",
			m.Result.PeakReservedBytes, b.Result.PeakReservedBytes)
	}
	var o *Outcome
	for i := range c.Decision.Results {
		if r := &c.Decision.Results[i]; r.Label == "mapping" {
			o = r
		}
	}
	if o == nil || o.Exact || o.ErrorPct != 50 || o.Setting != facts.TorchConf || o.Env != facts.Env() {
		t.Fatalf("outcome %+v, want a model of 50%% error whose setting is %s", o, facts.TorchConf)
	}
	// Lower, but not by more than its error: the exact baseline wins.
	if o.Recommended || c.Decision.Recommendation.Label != base {
		t.Errorf("recommended %s, want %s: a 50%% error outweighs the saving", c.Decision.Recommendation.Label, base)
	}
	// The same runs with a small error: now the model wins.
	unregister()
	facts.ErrorPct = 0.01
	registerMapper(t, facts)
	d := Decide(c.Runs, Goal{Kind: GoalReserved})
	if d.Recommendation.Label != "mapping" || d.Recommendation.ErrorPct != 0.01 || d.Recommendation.Env != facts.Env() {
		t.Errorf("with a 0.01%% error: recommendation %+v, want the mapper", d.Recommendation)
	}
}
