package allocator

import (
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator/internal/fakedev"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

func TestNames(t *testing.T) {
	want := []string{"caching", "expandable", "pooled", "bfc", "ideal", "paged"}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, n := range want {
		if Describe(n) == "" {
			t.Errorf("Describe(%q) is empty", n)
		}
	}
	if Describe("async") != Describe("pooled") || Describe("ASYNC") != Describe("pooled") {
		t.Errorf("async is not an alias of pooled in Describe")
	}
	if Describe("nope") != "" {
		t.Errorf("Describe of an unknown name = %q, want empty", Describe("nope"))
	}
}

// TestFacts checks the registry's facts against the policies they describe:
// names and aliases resolve as NewFactory resolves them, the exact policies
// are PyTorch's own, and the page sizes are the policies' default ones.
func TestFacts(t *testing.T) {
	all := All()
	if len(all) != len(Names()) {
		t.Fatalf("All() has %d entries, Names() %d", len(all), len(Names()))
	}
	for i, f := range all {
		if f.Name != Names()[i] {
			t.Errorf("All()[%d].Name = %q, want %q", i, f.Name, Names()[i])
		}
		if f.Describe != Describe(f.Name) || f.Describe == "" {
			t.Errorf("%s: Describe %q, registry says %q", f.Name, f.Describe, Describe(f.Name))
		}
		if f.Exact && f.ErrorPct != 0 {
			t.Errorf("%s: exact with an error of %v%%", f.Name, f.ErrorPct)
		}
		for _, a := range append([]string{f.Name, strings.ToUpper(f.Name), " " + f.Name + " "}, f.Aliases...) {
			g, ok := Lookup(a)
			if !ok || g.Name != f.Name {
				t.Errorf("Lookup(%q) = %q, %v; want %q", a, g.Name, ok, f.Name)
			}
			if _, err := NewFactory(a, "", nil); err != nil {
				t.Errorf("NewFactory(%q): %v", a, err)
			}
		}
	}
	exact := map[string]bool{}
	for _, f := range all {
		exact[f.Name] = f.Exact
	}
	if want := map[string]bool{"caching": true, "expandable": true, "pooled": false, "bfc": false, "ideal": false, "paged": false}; !maps.Equal(exact, want) {
		t.Errorf("exact policies = %v, want %v", exact, want)
	}
	for _, tt := range []struct {
		name string
		page uint64
	}{{"caching", 2 << 20}, {"expandable", 2 << 20}, {"async", 32 << 20}, {"paged", 2 << 20}, {"bfc", 0}, {"ideal", 0}} {
		if f, _ := Lookup(tt.name); f.PageBytes != tt.page {
			t.Errorf("Lookup(%q).PageBytes = %d, want %d", tt.name, f.PageBytes, tt.page)
		}
	}
	if f, _ := Lookup("pooled"); f.ErrorPct <= 0 || !slices.Equal(f.Aliases, []string{"async"}) {
		t.Errorf("pooled: ErrorPct %v, aliases %v; want a measured error and alias async", f.ErrorPct, f.Aliases)
	}
	if _, ok := Lookup("tlsf"); ok {
		t.Error("Lookup of an unknown name succeeded")
	}
	// The facts handed out are copies.
	all[2].Aliases[0] = "x"
	if f, _ := Lookup("async"); f.Name != "pooled" {
		t.Error("changing All()'s result changed the registry")
	}
}

func TestNewFactoryErrors(t *testing.T) {
	_, err := NewFactory("tlsf", "", nil)
	if err == nil {
		t.Fatal("unknown policy: no error")
	}
	for _, n := range append(Names(), "async") {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not list %q", err, n)
		}
	}
	for _, tt := range []struct{ name, conf, want string }{
		{"bfc", "initial_region:2", "policy bfc: unknown option"},
		{"async", "granularity_mb:x", "policy pooled: option granularity_mb"},
		{"paged", "page_mb", "policy paged"},
		{"caching", "max_split_size_mb:nope", "policy caching"},
		{"expandable", "bogus_key:1", "policy expandable"},
		{"caching", "backend:cudaMallocAsync", "--policy pooled"},
	} {
		if _, err := NewFactory(tt.name, tt.conf, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewFactory(%q, %q) error = %v, want one containing %q", tt.name, tt.conf, err, tt.want)
		}
	}
}

// build makes the named policy on a fresh fake device.
func build(t *testing.T, name, conf string, h *trace.Header) (driver.Policy, *fakedev.Device) {
	t.Helper()
	f, err := NewFactory(name, conf, h)
	if err != nil {
		t.Fatalf("NewFactory(%q, %q): %v", name, conf, err)
	}
	d := &fakedev.Device{Total: 80 << 30}
	p, err := f(d, h)
	if err != nil {
		t.Fatalf("factory %q: %v", name, err)
	}
	return p, d
}

// TestCachingSettings checks where caching and expandable take their
// settings: the header when conf is empty, conf alone otherwise, and
// expandable forcing expandable segments on. Expandable segments show as
// mapped pages on the device, plain segments as device mallocs.
func TestCachingSettings(t *testing.T) {
	recordedExpandable := &trace.Header{AllocConf: "expandable_segments:True"}
	for _, tt := range []struct {
		name, conf string
		h          *trace.Header
		maps       bool
	}{
		{"caching", "", nil, false},
		{"caching", "", recordedExpandable, true},
		{"caching", "max_split_size_mb:200", recordedExpandable, false}, // conf replaces the header
		{"expandable", "", nil, true},
		{"expandable", "expandable_segments:False", nil, true},
	} {
		p, d := build(t, tt.name, tt.conf, tt.h)
		if _, err := p.Malloc(5<<20, 0); err != nil {
			t.Fatal(err)
		}
		if got := d.Maps > 0; got != tt.maps || (d.Mallocs > 0) == tt.maps {
			t.Errorf("%s conf %q header %v: %d maps, %d mallocs; want expandable=%v", tt.name, tt.conf, tt.h, d.Maps, d.Mallocs, tt.maps)
		}
		if p.Name() != tt.name && !(tt.name == "caching" && tt.maps) {
			t.Errorf("policy name %q, want %q", p.Name(), tt.name)
		}
	}
	// The factory made without a header takes the replayed trace's settings.
	f, err := NewFactory("caching", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakedev.Device{Total: 80 << 30}
	p, err := f(d, recordedExpandable)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Malloc(5<<20, 0); err != nil || d.Maps == 0 {
		t.Errorf("caching factory without a header ignored the replayed trace's settings (maps %d, err %v)", d.Maps, err)
	}
}

func TestAliasBuildsPooled(t *testing.T) {
	p, _ := build(t, "async", "", nil)
	if p.Name() != "pooled" {
		t.Errorf("async built %q, want pooled", p.Name())
	}
}

// TestNoPolicyBelowIdeal replays random request streams through every
// policy: none may reserve less at its peak than ideal, whose peak must be
// the stream's peak live requested bytes; live blocks of contiguous
// policies never overlap.
func TestNoPolicyBelowIdeal(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for seed := range uint64(seeds) {
		ops, peakLive := randomStream(seed, 1500)
		var idealPeak uint64
		peaks := map[string]uint64{}
		for _, name := range Names() {
			p, d := build(t, name, "", nil)
			replayOps(t, name, seed, p, d, ops)
			peaks[name] = d.Peak
			if name == "ideal" {
				idealPeak = d.Peak
			}
		}
		if idealPeak != peakLive {
			t.Errorf("seed %d: ideal peak %d, want the peak live requested bytes %d", seed, idealPeak, peakLive)
		}
		for name, pk := range peaks {
			if pk < idealPeak {
				t.Errorf("seed %d: %s peak reserved %d is below ideal's %d", seed, name, pk, idealPeak)
			}
		}
	}
}

type rop struct {
	kind   byte // 'm' malloc, 'r' free requested, 'c' free completed, 'e' empty cache
	id     int
	size   uint64
	stream trace.StreamID
}

// randomStream returns a request stream with transformer-like sizes, two
// streams, delayed free completions (at most 32 pending) and at most 200
// live blocks, and its
// peak live requested bytes
// (a block is live until its free completes).
func randomStream(seed uint64, n int) ([]rop, uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	var ops []rop
	var live, pending []int
	sizes := map[int]uint64{}
	var cur, peak uint64
	next := 0
	for len(ops) < n {
		switch x := rng.IntN(100); {
		case (x < 50 && len(live) < 200) || len(live) == 0:
			var size uint64
			switch y := rng.IntN(10); {
			case y < 5:
				size = uint64(1 + rng.IntN(1<<20))
			case y < 8:
				size = uint64(1<<20 + rng.IntN(20<<20))
			default:
				size = uint64(20<<20 + rng.IntN(200<<20))
			}
			ops = append(ops, rop{kind: 'm', id: next, size: size, stream: trace.StreamID(rng.IntN(2))})
			sizes[next] = size
			live = append(live, next)
			next++
			cur += size
			peak = max(peak, cur)
		case x < 90 || len(live) >= 200:
			i := rng.IntN(len(live))
			id := live[i]
			live = slices.Delete(live, i, i+1)
			ops = append(ops, rop{kind: 'r', id: id})
			if rng.IntN(4) == 0 && len(pending) < 32 {
				pending = append(pending, id)
			} else {
				ops = append(ops, rop{kind: 'c', id: id})
				cur -= sizes[id]
			}
		case x < 99:
			if len(pending) > 0 {
				ops = append(ops, rop{kind: 'c', id: pending[0]})
				cur -= sizes[pending[0]]
				pending = pending[1:]
			}
		default:
			ops = append(ops, rop{kind: 'e'})
		}
	}
	for _, id := range pending {
		ops = append(ops, rop{kind: 'c', id: id})
	}
	return ops, peak
}

func replayOps(t *testing.T, name string, seed uint64, p driver.Policy, d *fakedev.Device, ops []rop) {
	t.Helper()
	blocks := map[int]driver.Block{}
	for i, o := range ops {
		switch o.kind {
		case 'm':
			b, err := p.Malloc(o.size, o.stream)
			if err != nil {
				if errors.Is(err, driver.ErrOOM) {
					t.Fatalf("%s seed %d op %d: out of memory on an unlimited device: %v", name, seed, i, err)
				}
				t.Fatalf("%s seed %d op %d: %v", name, seed, i, err)
			}
			if b.SizeBytes < o.size {
				t.Fatalf("%s seed %d op %d: block of %d bytes for a request of %d", name, seed, i, b.SizeBytes, o.size)
			}
			if name != "paged" { // paged blocks are not contiguous
				for id, s := range blocks {
					if b.Addr < s.Addr+s.SizeBytes && s.Addr < b.Addr+b.SizeBytes {
						t.Fatalf("%s seed %d op %d: block [%#x,+%d) overlaps live block %d [%#x,+%d)",
							name, seed, i, b.Addr, b.SizeBytes, id, s.Addr, s.SizeBytes)
					}
				}
			}
			blocks[o.id] = b
		case 'r':
			p.FreeRequested(blocks[o.id])
		case 'c':
			p.FreeCompleted(blocks[o.id])
			delete(blocks, o.id)
		case 'e':
			p.EmptyCache()
		}
		if len(d.Errors) > 0 {
			t.Fatalf("%s seed %d op %d: device misuse: %v", name, seed, i, d.Errors)
		}
		if c, ok := p.(fakedev.Checker); ok {
			if msg := c.Check(); msg != "" {
				t.Fatalf("%s seed %d op %d: %s", name, seed, i, msg)
			}
		}
	}
}

// TestMapPages checks the device-cost model of the policies that map:
// PyTorch's expandable segments map 20 MiB pages in the large pool and
// 2 MiB ones in the small; CUDA's pool grows in pieces of 32 MiB.
func TestMapPages(t *testing.T) {
	for _, tc := range []struct {
		n          uint64
		torch, gpu uint64
	}{
		{2 << 20, 1, 1}, {20 << 20, 1, 1}, {60 << 20, 3, 2}, {6 << 20, 3, 1}, {64 << 20, 32, 2}, {160 << 20, 8, 5},
	} {
		for _, p := range []struct {
			name string
			want uint64
		}{{"caching", tc.torch}, {"expandable", tc.torch}, {"pooled", tc.gpu}} {
			f, _ := Lookup(p.name)
			if got := f.MapPages(tc.n); got != p.want {
				t.Errorf("%s: MapPages(%d MiB) = %d, want %d", p.name, tc.n>>20, got, p.want)
			}
		}
	}
}

// TestRoles checks the facts the analysis weighs a policy by: one
// baseline (PyTorch's default, exact, no setting), one limit, the
// defaults a comparison replays, and how to apply each.
func TestRoles(t *testing.T) {
	if b := BaselineFacts(); b.Name != "caching" || !b.Exact || b.TorchConf != "" || b.Apply == "" {
		t.Errorf("baseline %+v, want caching, exact, with no setting", b)
	}
	if l, ok := LimitFacts(); !ok || l.Name != "ideal" {
		t.Errorf("limit %+v, %v; want ideal", l, ok)
	}
	if got, want := Defaults(), []string{"caching", "expandable", "pooled", "bfc", "ideal"}; !slices.Equal(got, want) {
		t.Errorf("Defaults() = %v, want %v", got, want)
	}
	for _, f := range All() {
		if f.Apply == "" {
			t.Errorf("%s: no Apply", f.Name)
		}
		if f.TorchConf != "" && f.Apply != f.Env() {
			t.Errorf("%s: Apply %q, want its env line %q", f.Name, f.Apply, f.Env())
		}
		if f.TorchConf != "" && f.Role != Candidate {
			t.Errorf("%s: a %s with a PyTorch setting", f.Name, f.Role)
		}
	}
	arms := map[string]string{}
	for _, f := range All() {
		if f.WallArm != "" {
			arms[f.Name] = f.WallArm
		}
	}
	if want := map[string]string{"caching": "native", "expandable": "expandable", "pooled": "async"}; !maps.Equal(arms, want) {
		t.Errorf("wall-time arms %v, want %v (the workload scripts' tags)", arms, want)
	}
}

// TestRegister checks that a policy registered is built, looked up and
// listed like the registry's own, that its removal leaves the registry as
// it was, and that Register refuses a taken name or a second baseline.
func TestRegister(t *testing.T) {
	before := Names()
	remove := Register(Entry{
		Facts: Facts{Name: "Fake", Aliases: []string{"phony"}, Apply: "x"},
		Build: builtin[4].Build, // ideal's
	})
	if f, ok := Lookup("PHONY"); !ok || f.Name != "fake" {
		t.Errorf("Lookup(PHONY) = %+v, %v", f, ok)
	}
	if _, err := NewFactory("phony", "", nil); err != nil {
		t.Errorf("NewFactory(phony): %v", err)
	}
	if got := Names(); !slices.Equal(got, append(slices.Clone(before), "fake")) {
		t.Errorf("Names() = %v", got)
	}
	remove()
	if got := Names(); !slices.Equal(got, before) {
		t.Errorf("after removal Names() = %v, want %v", got, before)
	}
	for _, e := range []Entry{
		{Facts: Facts{Name: "caching"}, Build: builtin[4].Build},
		{Facts: Facts{Name: "x", Aliases: []string{"async"}}, Build: builtin[4].Build},
		{Facts: Facts{Name: "x", Role: Baseline}, Build: builtin[4].Build},
		{Facts: Facts{Name: "x"}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%+v) did not refuse it", e.Facts)
				}
			}()
			Register(e)
		}()
	}
	if _, err := NewFactory("nope", "", nil); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("unknown policy: %v, want ErrUnknownPolicy", err)
	}
}
