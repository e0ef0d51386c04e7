package report

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/fragsim/fragsim/allocator/caching"
	"github.com/fragsim/fragsim/trace/pickle"
)

// configurer is a policy that runs under PyTorch's caching allocator
// settings, resolved (the trace's own, or a --conf, with what the policy
// forces, such as expandable segments).
type configurer interface {
	Config() caching.Config
}

// vizSettings returns what writes a snapshot's allocator_settings: the
// settings the probed policies ran under, as PyTorch's snapshot keys
// (trace/pytorch reads them back into the replay's configuration), with
// PYTORCH_CUDA_ALLOC_CONF saying the same. A policy that is not the
// caching allocator has only its conf string.
func vizSettings(probes []*probe, conf string) func(*pickle.Encoder) {
	var cfg *caching.Config
	for _, p := range probes {
		if c, ok := p.Policy.(configurer); ok {
			x := c.Config()
			cfg = &x
			break
		}
	}
	return func(e *pickle.Encoder) {
		e.BeginDict()
		e.Str("PYTORCH_CUDA_ALLOC_CONF")
		if cfg == nil {
			e.Str(conf)
			e.Str("expandable_segments")
			e.Bool(false)
			e.EndDict()
			return
		}
		e.Str(confWith(conf, cfg.Expandable))
		e.Str("max_split_size")
		if cfg.MaxSplitSize == math.MaxUint64 {
			e.Int(-1)
		} else {
			e.Uint(cfg.MaxSplitSize)
		}
		e.Str("max_non_split_rounding_size")
		e.Uint(cfg.MaxNonSplitRounding)
		e.Str("large_segment_size")
		e.Uint(cfg.LargeSegmentSize)
		e.Str("garbage_collection_threshold")
		e.Float(cfg.GCThreshold)
		e.Str("expandable_segments")
		e.Bool(cfg.Expandable)
		e.Str("release_lock_on_cudamalloc")
		e.Bool(cfg.ReleaseLockOnCudaMalloc)
		e.Str("graph_capture_record_stream_reuse")
		e.Bool(cfg.GraphCaptureRecordStreamReuse)
		if cfg.Fraction > 0 && cfg.Fraction < 1 {
			e.Str("per_process_memory_fraction")
			e.Float(cfg.Fraction)
		}
		e.Str("roundup_power2_divisions")
		e.BeginDict()
		for i, d := range cfg.RoundupPower2Divisions {
			e.Str(strconv.Itoa(1 << i))
			e.Uint(d)
		}
		e.EndDict()
		e.EndDict()
	}
}

var expandableKey = regexp.MustCompile(`(^|,)\s*expandable_segments\s*:\s*[A-Za-z0-9]*\s*`)

// confWith returns conf saying expandable_segments as expandable does:
// a policy may force it (expandable), and then the string says so too.
func confWith(conf string, expandable bool) string {
	if c, err := caching.ParseConf(conf); err == nil && c.Expandable == expandable {
		return conf
	}
	conf = strings.Trim(expandableKey.ReplaceAllString(conf, "$1"), ", ")
	conf = strings.ReplaceAll(conf, ",,", ",")
	v := "False"
	if expandable {
		v = "True"
	}
	return strings.Trim(conf+",expandable_segments:"+v, ",")
}
