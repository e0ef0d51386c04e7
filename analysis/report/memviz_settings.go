package report

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/trace/pickle"
)

// vizSettings returns what writes a snapshot's allocator_settings: the
// settings the probed policies ran under, as PyTorch's snapshot keys
// (trace/pytorch reads them back into the replay's configuration), with
// PYTORCH_CUDA_ALLOC_CONF saying the same. A policy that is not the
// caching allocator has only its conf string.
func vizSettings(probes []*probe, conf string) func(*pickle.Encoder) {
	for _, p := range probes {
		cfg, ok := allocator.TorchSettings(p.Policy)
		if !ok {
			continue
		}
		return func(e *pickle.Encoder) {
			e.BeginDict()
			e.Str("PYTORCH_CUDA_ALLOC_CONF")
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
	return func(e *pickle.Encoder) {
		e.BeginDict()
		e.Str("PYTORCH_CUDA_ALLOC_CONF")
		e.Str(conf)
		e.Str("expandable_segments")
		e.Bool(false)
		e.EndDict()
	}
}

var expandableKey = regexp.MustCompile(`(^|,)\s*expandable_segments\s*:\s*([A-Za-z0-9]*)\s*`)

// confWith returns conf saying expandable_segments as expandable does:
// a policy may force it, and then the string says so too.
func confWith(conf string, expandable bool) string {
	says := false // PyTorch's default
	for _, m := range expandableKey.FindAllStringSubmatch(conf, -1) {
		says = m[2] == "True" || m[2] == "true" || m[2] == "1"
	}
	if says == expandable {
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
