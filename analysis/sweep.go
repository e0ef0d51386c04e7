package analysis

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"sort"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// Variant is one change the advice sweep replays: a caching allocator
// setting, emptying the cache at a rhythm, or padding requests.
type Variant struct {
	// Knob names what is varied: expandable_segments, max_split_size_mb,
	// roundup_power2_divisions, garbage_collection_threshold, empty_cache,
	// padding.
	Knob string `json:"knob"`
	// Conf is the PYTORCH_CUDA_ALLOC_CONF fragment, for settings.
	Conf string `json:"conf,omitempty"`
	// EmptyCacheEvery calls empty_cache after every N requests.
	EmptyCacheEvery int64 `json:"empty_cache_every,omitempty"`
	// PadPow2 rounds every request up to the next power of two.
	PadPow2 bool `json:"pad_pow2,omitempty"`
}

// Label names the variant.
func (v Variant) Label() string {
	switch {
	case v.Conf != "":
		return v.Conf
	case v.EmptyCacheEvery > 0:
		return fmt.Sprintf("empty_cache every %d requests", v.EmptyCacheEvery)
	case v.PadPow2:
		return "pad requests to powers of two"
	}
	return v.Knob
}

// apply says how to make the change in PyTorch.
func (v Variant) apply() string {
	switch {
	case v.Conf != "":
		return "PYTORCH_CUDA_ALLOC_CONF=" + v.Conf
	case v.EmptyCacheEvery > 0:
		return fmt.Sprintf("call torch.cuda.empty_cache() every %d allocations (e.g. between requests)", v.EmptyCacheEvery)
	case v.PadPow2:
		return "pad batch and sequence dimensions so tensor sizes fall in power-of-two buckets"
	}
	return ""
}

// DefaultSweep is the advice sweep: each knob over a few values.
func DefaultSweep() []Variant {
	vs := []Variant{{Knob: "expandable_segments", Conf: "expandable_segments:True"}}
	for _, mb := range []int{32, 64, 128, 256, 512} {
		vs = append(vs, Variant{Knob: "max_split_size_mb", Conf: fmt.Sprintf("max_split_size_mb:%d", mb)})
	}
	for _, d := range []int{2, 4, 8, 16} {
		vs = append(vs, Variant{Knob: "roundup_power2_divisions", Conf: fmt.Sprintf("roundup_power2_divisions:%d", d)})
	}
	for _, t := range []string{"0.6", "0.8"} {
		vs = append(vs, Variant{Knob: "garbage_collection_threshold", Conf: "garbage_collection_threshold:" + t})
	}
	for _, n := range []int64{100, 1000, 10000} {
		vs = append(vs, Variant{Knob: "empty_cache", EmptyCacheEvery: n})
	}
	return append(vs, Variant{Knob: "padding", PadPow2: true})
}

// Advice is one replayed variant, measured against the caching baseline.
type Advice struct {
	Variant
	Setting           string  `json:"setting"`
	Apply             string  `json:"apply"`
	AtPeakPct         float64 `json:"at_peak_pct"`
	PeakReservedBytes uint64  `json:"peak_reserved_bytes"`
	StrandedBytes     uint64  `json:"stranded_bytes"`
	DeviceCalls       int64   `json:"device_calls"` // allocator cost: cudaMalloc/cudaFree (and map/unmap)
	OOMs              int64   `json:"ooms"`
	// RemovedPct is the share of the baseline's at_peak_pct removed.
	RemovedPct float64 `json:"removed_pct"`
	// ReservedDeltaBytes is the change of peak reserved from the baseline.
	ReservedDeltaBytes int64  `json:"reserved_delta_bytes"`
	Note               string `json:"note,omitempty"`
	Error              string `json:"error,omitempty"`
	Rank               int    `json:"rank"`
}

// sweep holds the advice replays.
type sweep struct {
	open     Opener
	h        *trace.Header
	opts     AnalyzeOptions
	base     string
	baseline *job
	jobs     []*job // first phase: the baseline and every variant that needs no cap
	later    []Variant
	all      []*job
	variants map[*job]Variant
	notes    map[*job]string
}

// hasFraction reports whether the replay runs under a memory fraction.
func hasFraction(h *trace.Header, cfg replay.Config) bool {
	f := cfg.Fraction
	if f == 0 && h != nil {
		f = h.MemoryFraction
	}
	return f > 0 && f < 1
}

func newSweep(open Opener, h *trace.Header, opts AnalyzeOptions, vs []Variant) (*sweep, error) {
	s := &sweep{open: open, h: h, opts: opts, base: opts.Conf, variants: map[*job]Variant{}, notes: map[*job]string{}}
	if s.base == "" && h != nil {
		s.base = h.AllocConf
	}
	f, err := allocator.NewFactory("caching", opts.Conf, h)
	if err != nil {
		return nil, err
	}
	s.baseline = &job{run: &Run{Label: "caching (baseline)", Policy: "caching", Conf: opts.Conf}, factory: f, cfg: opts.Config, noSeries: true}
	s.jobs = append(s.jobs, s.baseline)
	for _, v := range vs {
		if v.Knob == "garbage_collection_threshold" && !hasFraction(h, opts.Config) {
			s.later = append(s.later, v)
			continue
		}
		j, err := s.job(v, opts.Config)
		if err != nil {
			return nil, err
		}
		s.jobs = append(s.jobs, j)
	}
	return s, nil
}

// job builds the replay of one variant.
func (s *sweep) job(v Variant, cfg replay.Config) (*job, error) {
	conf := s.opts.Conf
	if v.Conf != "" {
		conf = joinConf(s.base, v.Conf)
	}
	f, err := allocator.NewFactory("caching", conf, s.h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v.Label(), err)
	}
	cfg.EmptyCacheEvery = v.EmptyCacheEvery
	j := &job{run: &Run{Label: v.Label(), Policy: "caching", Conf: conf, Setting: v.Label()}, factory: f, cfg: cfg, noSeries: true}
	if v.PadPow2 {
		j.open = padTransform(s.open)
		s.notes[j] = "padding is internal waste that at_peak_pct does not count: judge it by peak reserved"
	}
	s.variants[j] = v
	s.all = append(s.all, j)
	return j, nil
}

// second runs the variants that needed the baseline first: the garbage
// collection threshold, under a fraction cap at the baseline's peak
// reserved (the threshold does nothing without a cap).
func (s *sweep) second(open Opener, opts AnalyzeOptions) error {
	if len(s.later) == 0 || !s.baseline.run.OK() {
		return nil
	}
	peak := s.baseline.run.Result.PeakReservedBytes
	if peak == 0 {
		return nil
	}
	cfg := opts.Config
	total := cfg.CapacityBytes
	if total == 0 && s.h != nil {
		total = s.h.GPUTotalBytes
	}
	if total < peak+cfg.OutsideBytes {
		total = 2 * (peak + cfg.OutsideBytes)
	}
	cfg.CapacityBytes = total
	cfg.Fraction = math.Min(1, float64(peak)/float64(total)*1.0001)
	var jobs []*job
	for _, v := range s.later {
		j, err := s.job(v, cfg)
		if err != nil {
			return err
		}
		s.notes[j] = fmt.Sprintf("under a memory fraction of %.4f (%s: the caching peak reserved), as "+
			"torch.cuda.set_per_process_memory_fraction", cfg.Fraction, FmtBytes(peak))
		jobs = append(jobs, j)
	}
	return runJobs(open, jobs, opts.Parallel, 0, opts.Progress)
}

// rank returns the baseline and the variants, best first: lowest
// at_peak_pct, ties to lower peak reserved; variants that fail or OOM
// where the baseline did not come last.
func (s *sweep) rank() (*replay.Result, []Advice) {
	var base *replay.Result
	if s.baseline.run.OK() {
		base = s.baseline.run.Result
	}
	var out []Advice
	for _, j := range s.all {
		v := s.variants[j]
		a := Advice{Variant: v, Setting: v.Label(), Apply: v.apply(), Note: s.notes[j], Error: j.run.Error}
		if r := j.run.Result; r != nil && j.run.Error == "" {
			a.AtPeakPct = r.Fragmentation.AtPeakPct
			a.PeakReservedBytes = r.PeakReservedBytes
			a.StrandedBytes = r.Fragmentation.StrandedBytes
			a.DeviceCalls = r.DeviceAllocs + r.DeviceFrees
			a.OOMs = r.OOMs
			if base != nil {
				if bp := base.Fragmentation.AtPeakPct; bp > 0 {
					a.RemovedPct = 100 * (bp - a.AtPeakPct) / bp
				}
				a.ReservedDeltaBytes = int64(r.PeakReservedBytes) - int64(base.PeakReservedBytes)
			}
		}
		out = append(out, a)
	}
	bad := func(a Advice) bool { return a.Error != "" || (base != nil && a.OOMs > base.OOMs) }
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if bad(a) != bad(b) {
			return !bad(a)
		}
		if math.Abs(a.AtPeakPct-b.AtPeakPct) > pctEqual {
			return a.AtPeakPct < b.AtPeakPct
		}
		return a.PeakReservedBytes < b.PeakReservedBytes
	})
	for i := range out {
		out[i].Rank = i + 1
	}
	return base, out
}

// nextPow2 rounds n up to a power of two.
func nextPow2(n uint64) uint64 {
	if n <= 1 {
		return n
	}
	return 1 << uint(bits.Len64(n-1))
}

// padTransform returns an opener of the trace open gives with every
// request rounded up to the next power of two. The recorded device events
// are dropped: they belong to the unpadded run.
func padTransform(open Opener) Opener {
	return func() (*trace.Reader, io.Closer, error) {
		src, c, err := open()
		if err != nil {
			return nil, nil, err
		}
		pr, pw := io.Pipe()
		go func() {
			pw.CloseWithError(copyPadded(src, pw))
		}()
		r, err := trace.NewReader(pr)
		if err != nil {
			pr.Close()
			if c != nil {
				c.Close()
			}
			return nil, nil, err
		}
		return r, closers{pr, c}, nil
	}
}

// copyPadded re-encodes src into w with padded requests.
func copyPadded(src *trace.Reader, w io.Writer) error {
	h := *src.Header()
	h.Approximate = append(append([]string(nil), h.Approximate...), "requests padded to powers of two by fragsim analyze")
	tw, err := trace.NewWriter(w, &h)
	if err != nil {
		return err
	}
	strs := map[trace.StringID]trace.StringID{}
	str := func(id trace.StringID) trace.StringID {
		if id == trace.NoString {
			return id
		}
		if n, ok := strs[id]; ok {
			return n
		}
		n := tw.String(src.String(id))
		strs[id] = n
		return n
	}
	stacks := map[trace.StackID]trace.StackID{}
	buf := make([]trace.Event, 4096)
	for {
		n, rerr := src.ReadEvents(buf)
		for _, e := range buf[:n] {
			if e.Kind.IsDevice() {
				continue
			}
			switch e.Kind {
			case trace.KindAlloc, trace.KindFreeRequested, trace.KindFreeCompleted:
				e.SizeBytes = nextPow2(e.SizeBytes)
			}
			e.Text = str(e.Text)
			if e.Stack != trace.NoStack {
				ns, ok := stacks[e.Stack]
				if !ok {
					frames := append([]trace.Frame(nil), src.Stack(e.Stack)...)
					for i := range frames {
						frames[i].Func, frames[i].File = str(frames[i].Func), str(frames[i].File)
					}
					ns = tw.Stack(frames)
					stacks[e.Stack] = ns
				}
				e.Stack = ns
			}
			if err := tw.WriteEvent(e); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	return tw.Close()
}

// closers closes several closers, returning the first error.
type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if c == nil {
			continue
		}
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
