package replay

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/fragsim/fragsim/trace"
)

// CapacityPresets are the device sizes ParseCapacity accepts by name.
// They are nominal sizes, except h200, which is the totalGlobalMem an H200
// reports (150,109,880,320 bytes).
var CapacityPresets = map[string]uint64{
	"t4":       16 << 30,
	"v100-16g": 16 << 30,
	"v100-32g": 32 << 30,
	"a10g":     24 << 30,
	"l4":       24 << 30,
	"rtx3090":  24 << 30,
	"rtx4090":  24 << 30,
	"rtx5090":  32 << 30,
	"l40s":     48 << 30,
	"a100-40g": 40 << 30,
	"a100-80g": 80 << 30,
	"h100-80g": 80 << 30,
	"h100-94g": 94 << 30,
	"h200":     150109880320,
	"b200":     180 << 30,
}

// PresetNames returns the preset names with their sizes, sorted, for help texts.
func PresetNames() []string {
	var out []string
	for k, v := range CapacityPresets {
		if v%(1<<30) == 0 {
			out = append(out, fmt.Sprintf("%s=%dGiB", k, v>>30))
		} else {
			out = append(out, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(out)
	return out
}

// MaxSizeBytes is the largest size ParseCapacity accepts: the most a trace
// may hold (trace.MaxSizeBytes, 2^48 bytes, 256 TiB). Every sum of a few
// such sizes (capacities, overheads, reserved bytes) stays far from
// overflowing 64 bits.
const MaxSizeBytes = trace.MaxSizeBytes

// ParseCapacity parses a memory size: a byte count (150109880320), a size
// with a unit (24GiB, 80G, 1.5TiB, 512MiB; K, M, G, T and KiB... are binary,
// KB, MB, GB, TB decimal), or a preset name (h200, a100-80g, ...). A size
// above MaxSizeBytes is an error, as is one that is not a number.
func ParseCapacity(s string) (uint64, error) {
	v, err := parseCapacity(s)
	if err == nil && v > MaxSizeBytes {
		return 0, fmt.Errorf("bad size %q: %d bytes is above the largest size, %d (256 TiB)", s, v, uint64(MaxSizeBytes))
	}
	return v, err
}

func parseCapacity(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	if v, ok := CapacityPresets[strings.ToLower(t)]; ok {
		return v, nil
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, fmt.Errorf("bad size %q: want bytes, a size like 24GiB, or a preset (%s)", s, strings.Join(PresetNames(), ", "))
	}
	var mult float64
	switch strings.ToLower(unit) {
	case "", "b":
		mult = 1
	case "k", "kib":
		mult = 1 << 10
	case "m", "mib":
		mult = 1 << 20
	case "g", "gib":
		mult = 1 << 30
	case "t", "tib":
		mult = 1 << 40
	case "kb":
		mult = 1e3
	case "mb":
		mult = 1e6
	case "gb":
		mult = 1e9
	case "tb":
		mult = 1e12
	default:
		return 0, fmt.Errorf("bad size %q: unknown unit %q", s, unit)
	}
	if unit == "" {
		v, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad size %q: %v", s, err)
		}
		return v, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("bad size %q: %q is not a number", s, num)
	}
	if f*mult > MaxSizeBytes {
		return 0, fmt.Errorf("bad size %q: above the largest size, %d bytes (256 TiB)", s, uint64(MaxSizeBytes))
	}
	return uint64(math.Round(f * mult)), nil
}

// FormatBytes renders a byte count in binary units (e.g. "12.50 GiB").
func FormatBytes(b uint64) string {
	const k = 1024
	switch {
	case b >= k*k*k*k:
		return fmt.Sprintf("%.2f TiB", float64(b)/(k*k*k*k))
	case b >= k*k*k:
		return fmt.Sprintf("%.2f GiB", float64(b)/(k*k*k))
	case b >= k*k:
		return fmt.Sprintf("%.2f MiB", float64(b)/(k*k))
	case b >= k:
		return fmt.Sprintf("%.2f KiB", float64(b)/k)
	}
	return fmt.Sprintf("%d B", b)
}
