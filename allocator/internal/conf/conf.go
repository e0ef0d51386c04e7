// Package conf parses the key:value option strings of fragsim's own allocator policies.
package conf

import (
	"fmt"
	"strconv"
	"strings"
)

// pytorchKeys are PYTORCH_CUDA_ALLOC_CONF keys. Policies other than PyTorch's
// accept and ignore them, so that one --conf string can go to every policy.
var pytorchKeys = map[string]bool{
	"backend":                           true,
	"expandable_segments":               true,
	"expandable_segments_reserve":       true,
	"max_split_size_mb":                 true,
	"roundup_power2_divisions":          true,
	"garbage_collection_threshold":      true,
	"max_non_split_rounding_mb":         true,
	"large_segment_size_mb":             true,
	"release_lock_on_cudamalloc":        true,
	"pinned_use_cuda_host_register":     true,
	"pinned_num_register_threads":       true,
	"pinned_use_background_threads":     true,
	"pinned_reserve_segment_size_mb":    true,
	"graph_capture_record_stream_reuse": true,
	"per_process_memory_fraction":       true,
}

// Setter applies one option's value.
type Setter func(value string) error

// Parse splits s into comma-separated key:value pairs (commas inside [...]
// do not split) and calls the setter of each key. Keys of
// PYTORCH_CUDA_ALLOC_CONF without a setter are ignored; any other unknown
// key is an error that lists the known ones.
func Parse(s string, setters map[string]Setter) error {
	for _, item := range split(s) {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, ":")
		if !ok {
			return fmt.Errorf("option %q: want key:value", item)
		}
		k = strings.TrimSpace(k)
		v = strings.TrimSpace(v)
		set, known := setters[k]
		if !known {
			if pytorchKeys[k] {
				continue
			}
			return fmt.Errorf("unknown option %q (known: %s)", k, keys(setters))
		}
		if err := set(v); err != nil {
			return fmt.Errorf("option %s: %w", k, err)
		}
	}
	return nil
}

func split(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '[':
			depth++
		case ']':
			if depth > 0 {
				depth--
			}
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func keys(m map[string]Setter) string {
	if len(m) == 0 {
		return "none"
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	for i := 1; i < len(ks); i++ { // insertion sort: a handful of keys
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
	return strings.Join(ks, ", ")
}

// MiB returns a setter that reads a positive number of MiB (fractions
// allowed) into *dst as bytes, rounded down to a multiple of align (align 0
// or 1: no rounding), and refuses results below min bytes.
func MiB(dst *uint64, align, min uint64) Setter {
	return func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1<<24) {
			return fmt.Errorf("%q is not a positive number of MiB", v)
		}
		b := uint64(f * (1 << 20))
		if align > 1 {
			b -= b % align
		}
		if b < min {
			return fmt.Errorf("%s MiB is below the minimum of %d bytes", v, min)
		}
		*dst = b
		return nil
	}
}

// Bool returns a setter that reads true/false (also True/False, 1/0).
func Bool(dst *bool) Setter {
	return func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*dst = b
		return nil
	}
}
