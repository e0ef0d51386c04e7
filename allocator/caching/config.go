package caching

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pytorch/sizes"
)

// Sizes and constants of PyTorch's CUDA caching allocator (package sizes).
const (
	MinBlockSize       = sizes.MinBlockSize
	SmallSize          = sizes.SmallSize
	SmallBuffer        = sizes.SmallBuffer
	MinLargeAlloc      = sizes.MinLargeAlloc
	LargeBuffer        = sizes.LargeBuffer
	RoundLarge         = sizes.RoundLarge
	NumDivisionBuckets = sizes.NumDivisionBuckets
	mib                = 1 << 20
)

// Config holds every PYTORCH_CUDA_ALLOC_CONF setting the allocator's
// behaviour depends on, in bytes where the key is in MiB.
type Config struct {
	// MaxSplitSize is max_split_size_mb in bytes; math.MaxUint64 when unlimited.
	MaxSplitSize uint64
	// MaxNonSplitRounding is max_non_split_rounding_mb in bytes
	// (default: LargeSegmentSize).
	MaxNonSplitRounding uint64
	// RoundupPower2Divisions holds the divisions per size bucket
	// (bucket i covers [2^i MiB, 2^(i+1) MiB); bucket 0 also every size below).
	RoundupPower2Divisions [NumDivisionBuckets]uint64
	// GCThreshold is garbage_collection_threshold (0: off).
	GCThreshold float64
	// Expandable is expandable_segments.
	Expandable bool
	// LargeSegmentSize is large_segment_size_mb in bytes (default 20 MiB).
	LargeSegmentSize uint64
	// Fraction is per_process_memory_fraction (0: not set).
	Fraction float64
	// Backend is "native" or "cudaMallocAsync".
	Backend string
	// ReleaseLockOnCudaMalloc and the other keys below have no effect on
	// the allocator's decisions; they are kept so that a configuration
	// round-trips.
	ReleaseLockOnCudaMalloc       bool
	GraphCaptureRecordStreamReuse bool
	// Conf is the string the configuration was parsed from, if any.
	Conf string
}

// DefaultConfig returns PyTorch 2.11's defaults.
func DefaultConfig() Config {
	return Config{
		MaxSplitSize:        math.MaxUint64,
		MaxNonSplitRounding: LargeBuffer,
		LargeSegmentSize:    LargeBuffer,
		Backend:             "native",
	}
}

// splitConf splits "k:v,k:[a:b,c:d],..." into key/value pairs.
func splitConf(s string) ([][2]string, error) {
	var out [][2]string
	depth := 0
	start := 0
	var parts []string
	for i, c := range s {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("alloc conf %q: unbalanced ']' at offset %d", s, i)
			}
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("alloc conf %q: unbalanced '['", s)
	}
	parts = append(parts, s[start:])
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		k, v, ok := strings.Cut(p, ":")
		if !ok {
			return nil, fmt.Errorf("alloc conf: key %q has no value (want key:value)", p)
		}
		out = append(out, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	return out, nil
}

func parseBool(key, v string) (bool, error) {
	switch v {
	case "True", "true", "1":
		return true, nil
	case "False", "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("alloc conf key %s: want True or False, got %q", key, v)
}

// maxConfMiB bounds a size setting (2^40 MiB, an exbibyte): past it the
// bytes would overflow, and no device holds as much.
const maxConfMiB = 1 << 40

func parseMiB(key, v string, min uint64) (uint64, error) {
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || !(n >= 0) {
		return 0, fmt.Errorf("alloc conf key %s: want a size in MiB, got %q", key, v)
	}
	if n > maxConfMiB {
		return 0, fmt.Errorf("alloc conf key %s: %s MiB is above the largest size, %d MiB", key, v, uint64(maxConfMiB))
	}
	b := uint64(n) * mib
	if b < min {
		return 0, fmt.Errorf("alloc conf key %s: %s MiB is below the minimum of %d MiB", key, v, min/mib)
	}
	return b, nil
}

func isPow2(n uint64) bool { return n != 0 && n&(n-1) == 0 }

func parseDivisions(key, v string, d *[NumDivisionBuckets]uint64) error {
	*d = [NumDivisionBuckets]uint64{}
	if !strings.HasPrefix(v, "[") {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || (n != 0 && !isPow2(n)) {
			return fmt.Errorf("alloc conf key %s: want a power of two, got %q", key, v)
		}
		for i := range d {
			d[i] = n
		}
		return nil
	}
	if !strings.HasSuffix(v, "]") {
		return fmt.Errorf("alloc conf key %s: unterminated list %q", key, v)
	}
	first := true
	last := -1
	for _, item := range strings.Split(v[1:len(v)-1], ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		ks, vs, ok := strings.Cut(item, ":")
		if !ok {
			return fmt.Errorf("alloc conf key %s: list item %q is not size:divisions", key, item)
		}
		val, err := strconv.ParseUint(strings.TrimSpace(vs), 10, 64)
		if err != nil || (val != 0 && !isPow2(val)) {
			return fmt.Errorf("alloc conf key %s: divisions %q must be 0 or a power of two", key, vs)
		}
		ks = strings.TrimSpace(ks)
		if ks == ">" {
			for i := last + 1; i < NumDivisionBuckets; i++ {
				d[i] = val
			}
			continue
		}
		k, err := strconv.ParseUint(ks, 10, 64)
		if err != nil || !isPow2(k) {
			return fmt.Errorf("alloc conf key %s: interval %q must be a power of two (MiB)", key, ks)
		}
		idx := 63 - bits.LeadingZeros64(k)
		if idx > NumDivisionBuckets-1 {
			idx = NumDivisionBuckets - 1
		}
		if first {
			for i := 0; i < idx; i++ {
				d[i] = val
			}
			first = false
		}
		d[idx] = val
		last = idx
	}
	return nil
}

// ParseConf parses a PYTORCH_CUDA_ALLOC_CONF string. As PyTorch does,
// large_segment_size_mb is read first, and keys not given keep their
// defaults. Errors name the key.
func ParseConf(s string) (Config, error) {
	c := DefaultConfig()
	c.Conf = s
	kvs, err := splitConf(s)
	if err != nil {
		return c, err
	}
	for _, kv := range kvs {
		if kv[0] == "large_segment_size_mb" {
			n, err := strconv.ParseUint(kv[1], 10, 64)
			if err != nil || n <= 10 {
				return c, fmt.Errorf("alloc conf key large_segment_size_mb: want an integer > 10, got %q", kv[1])
			}
			c.LargeSegmentSize = n * mib
			c.MaxNonSplitRounding = c.LargeSegmentSize
		}
	}
	for _, kv := range kvs {
		k, v := kv[0], kv[1]
		switch k {
		case "large_segment_size_mb":
		case "max_split_size_mb":
			if c.MaxSplitSize, err = parseMiB(k, v, c.LargeSegmentSize); err != nil {
				return c, err
			}
		case "max_non_split_rounding_mb":
			if c.MaxNonSplitRounding, err = parseMiB(k, v, c.LargeSegmentSize); err != nil {
				return c, err
			}
		case "garbage_collection_threshold":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0 && f < 1) {
				return c, fmt.Errorf("alloc conf key %s: want a number in (0, 1), got %q", k, v)
			}
			c.GCThreshold = f
		case "roundup_power2_divisions":
			if err := parseDivisions(k, v, &c.RoundupPower2Divisions); err != nil {
				return c, err
			}
		case "expandable_segments":
			if c.Expandable, err = parseBool(k, v); err != nil {
				return c, err
			}
		case "per_process_memory_fraction":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return c, fmt.Errorf("alloc conf key %s: want a number in [0, 1], got %q", k, v)
			}
			c.Fraction = f
		case "backend":
			if v != "native" && v != "cudaMallocAsync" {
				return c, fmt.Errorf("alloc conf key backend: want native or cudaMallocAsync, got %q", v)
			}
			c.Backend = v
		case "release_lock_on_cudamalloc":
			if c.ReleaseLockOnCudaMalloc, err = parseBool(k, v); err != nil {
				return c, err
			}
		case "graph_capture_record_stream_reuse":
			if c.GraphCaptureRecordStreamReuse, err = parseBool(k, v); err != nil {
				return c, err
			}
		case "pinned_use_cuda_host_register", "pinned_use_background_threads",
			"throw_on_cudamalloc_oom", "pinned_free_catch_all":
			if _, err = parseBool(k, v); err != nil {
				return c, err
			}
		case "pinned_num_register_threads", "pinned_reserve_segment_size_mb",
			"expandable_segments_reserve", "expandable_segments_reserve_by_class":
			// host-memory and VA-only settings: no effect on device blocks
		default:
			return c, fmt.Errorf("alloc conf: unrecognized key %q", k)
		}
	}
	return c, nil
}

// FromHeader returns the configuration a trace was recorded with: the raw
// alloc conf string, overridden by the parsed allocator settings the
// producer stored (PyTorch's allocator_settings), and the header's memory
// fraction. A setting it cannot use is a *trace.SettingError.
func FromHeader(h *trace.Header) (Config, error) {
	c, err := fromHeader(h)
	if err != nil {
		return c, &trace.SettingError{Err: err}
	}
	return c, nil
}

func fromHeader(h *trace.Header) (Config, error) {
	c := DefaultConfig()
	if h == nil {
		return c, nil
	}
	var err error
	if h.AllocConf != "" {
		if c, err = ParseConf(h.AllocConf); err != nil {
			return c, err
		}
	}
	s := h.AllocSettings
	if v, ok := s["large_segment_size"]; ok && v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return c, fmt.Errorf("allocator setting large_segment_size: bad value %q", v)
		}
		c.LargeSegmentSize = n
	}
	if v, ok := s["max_split_size"]; ok && v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("allocator setting max_split_size: bad value %q", v)
		}
		if n < 0 {
			c.MaxSplitSize = math.MaxUint64
		} else {
			c.MaxSplitSize = uint64(n)
		}
	}
	if v, ok := s["max_non_split_rounding_size"]; ok && v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("allocator setting max_non_split_rounding_size: bad value %q", v)
		}
		c.MaxNonSplitRounding = n
	}
	if v, ok := s["garbage_collection_threshold"]; ok && v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f < 1) {
			return c, fmt.Errorf("allocator setting garbage_collection_threshold: bad value %q", v)
		}
		c.GCThreshold = f
	}
	if v, ok := s["expandable_segments"]; ok && v != "" {
		if c.Expandable, err = parseBool("expandable_segments", v); err != nil {
			return c, err
		}
	}
	if v, ok := s["roundup_power2_divisions"]; ok && v != "" {
		if err := parseSettingsDivisions(v, &c.RoundupPower2Divisions); err != nil {
			return c, fmt.Errorf("allocator setting roundup_power2_divisions: %w", err)
		}
	}
	if h.MemoryFraction > 0 && c.Fraction == 0 {
		c.Fraction = h.MemoryFraction
	}
	return c, nil
}

// parseSettingsDivisions reads the snapshot's divisions dict ({"1": d, "2":
// d, ..., "32768": d}, keyed by the bucket's start in MiB), stored as JSON,
// or a conf-style value.
func parseSettingsDivisions(v string, d *[NumDivisionBuckets]uint64) error {
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		var m map[string]json.Number
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return fmt.Errorf("bad dict %q: %v", v, err)
		}
		*d = [NumDivisionBuckets]uint64{}
		for k, n := range m {
			key, err := strconv.ParseUint(k, 10, 64)
			if err != nil || !isPow2(key) {
				return fmt.Errorf("bad bucket key %q", k)
			}
			val, err := strconv.ParseUint(n.String(), 10, 64)
			if err != nil {
				return fmt.Errorf("bad divisions %q for bucket %s", n, k)
			}
			idx := 63 - bits.LeadingZeros64(key)
			if idx < NumDivisionBuckets {
				d[idx] = val
			}
		}
		return nil
	}
	return parseDivisions("roundup_power2_divisions", v, d)
}

// Divisions returns the roundup_power2_divisions that apply to size n.
func (c *Config) Divisions(n uint64) uint64 {
	return c.RoundupPower2Divisions[sizes.Bucket(n)]
}

// RoundSize is PyTorch's round_size: the block size a request of n bytes gets.
func (c *Config) RoundSize(n uint64) uint64 { return sizes.RoundSize(n, &c.RoundupPower2Divisions) }

// AllocationSize is PyTorch's get_allocation_size: the segment size for a
// rounded request s.
func (c *Config) AllocationSize(s uint64) uint64 { return sizes.AllocationSize(s, c.LargeSegmentSize) }
