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
	// EmptyCacheEvery calls empty_cache after every N allocations.
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
		return fmt.Sprintf("empty_cache every %d allocations", v.EmptyCacheEvery)
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

// setting is the replayed setting a variant stands for (padding has
// none), of the baseline policy.
func (v Variant) setting() Setting {
	return Setting{Conf: v.Conf, EmptyCacheEvery: v.EmptyCacheEvery}
}

// padNote says how to read the padded replay.
const padNote = "padding is internal waste that at_peak_pct does not count: judge it by peak reserved"

// padRun builds the replay of the trace with requests padded to powers of
// two, under the baseline policy and conf.
func padRun(open Opener, h *trace.Header, conf string, cfg replay.Config) (*job, error) {
	policy := baselinePolicy()
	f, err := allocator.NewFactory(policy, conf, h)
	if err != nil {
		return nil, optionError(policy, conf, "", err)
	}
	v := Variant{Knob: "padding", PadPow2: true}
	run := &Run{Label: v.Label(), Policy: policy, Conf: conf, Setting: v.Label(), Note: padNote}
	return &job{run: run, factory: f, cfg: cfg, noSeries: true, open: padTransform(open)}, nil
}

// rankAdvice returns the advice rows of the variants from their replays
// (runs, padded: the padded one), best first: lowest at_peak_pct, ties to
// lower peak reserved; variants that fail or OOM where the baseline did
// not come last.
func rankAdvice(vs []Variant, runs []*Run, padded *Run) (*replay.Result, []Advice) {
	var base *replay.Result
	if b := baselineRun(runs); b != nil {
		base = b.Result
	}
	find := func(v Variant) *Run {
		if v.PadPow2 {
			return padded
		}
		for _, r := range runs {
			if r != nil && !r.Limit && settingOf(r) == v.Label() && Exact(r.Policy) {
				return r
			}
		}
		return nil
	}
	var out []Advice
	for _, v := range vs {
		run := find(v)
		if run == nil {
			continue
		}
		a := Advice{Variant: v, Setting: v.Label(), Apply: v.apply(), Note: run.Note, Error: run.Error}
		if r := run.Result; r != nil && run.Error == "" {
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
	return transformTrace(open, func(src *trace.Reader, w io.Writer) error { return copyPadded(src, w) })
}

// transformTrace returns an opener of the trace that copy writes from
// the trace open gives, streamed through a pipe.
func transformTrace(open Opener, copy func(src *trace.Reader, w io.Writer) error) Opener {
	return func() (*trace.Reader, io.Closer, error) {
		src, c, err := open()
		if err != nil {
			return nil, nil, err
		}
		pr, pw := io.Pipe()
		go func() {
			pw.CloseWithError(copy(src, pw))
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
	return copyEdited(src, w, "requests padded to powers of two by fragsim analyze", func(e *trace.Event) bool {
		switch e.Kind {
		case trace.KindAlloc, trace.KindFreeRequested, trace.KindFreeCompleted:
			e.SizeBytes = nextPow2(e.SizeBytes)
		}
		return true
	})
}

// copyEdited re-encodes src into w with each event as edit leaves it,
// dropping the device events (they belong to the recorded run) and the
// events edit returns false for; note is added to the header's
// Approximate list.
func copyEdited(src *trace.Reader, w io.Writer, note string, edit func(e *trace.Event) bool) error {
	h := *src.Header()
	h.Approximate = append(append([]string(nil), h.Approximate...), note)
	tw, err := trace.NewWriter(w, &h)
	if err != nil {
		return err
	}
	ids := trace.NewRemap(src, tw)
	buf := make([]trace.Event, 4096)
	for {
		n, rerr := src.ReadEvents(buf)
		for _, e := range buf[:n] {
			if e.Kind.IsDevice() || !edit(&e) {
				continue
			}
			e = ids.Event(e)
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
