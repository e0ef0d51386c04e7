package pytorch

import (
	"math/bits"
	"strconv"

	"github.com/fragsim/fragsim/trace/pickle"
	"github.com/fragsim/fragsim/trace/pytorch/sizes"
)

// settings are the snapshot's allocator_settings that the conversion
// depends on.
type settings struct {
	divisions   sizes.Divisions
	maxSplit    uint64 // MaxUint64 when unlimited
	gcThreshold float64
	expandable  bool
}

// roundSize is PyTorch's round_size under s (for blocks the snapshot lost).
func (s *settings) roundSize(n uint64) uint64 { return sizes.RoundSize(n, &s.divisions) }

func (c *converter) settings(d *pickle.Dict) {
	h := &c.snap.header
	h.AllocSettings = map[string]string{}
	for _, p := range d.Pairs {
		switch p.Key {
		case "PYTORCH_CUDA_ALLOC_CONF":
			h.AllocConf, _ = p.Value.(string)
		case "roundup_power2_divisions":
			if dd, ok := p.Value.(*pickle.Dict); ok {
				for _, q := range dd.Pairs {
					k, err := strconv.ParseUint(q.Key, 10, 64)
					n, ok := toInt(q.Value)
					if err == nil && ok && k > 0 && k&(k-1) == 0 && n >= 0 {
						if idx := bits.TrailingZeros64(k); idx < 16 {
							c.set.divisions[idx] = uint64(n)
						}
					}
				}
			}
		case "max_split_size":
			if n, ok := toInt(p.Value); ok && n > 0 {
				c.set.maxSplit = uint64(n)
			}
		case "garbage_collection_threshold":
			switch x := p.Value.(type) {
			case float64:
				c.set.gcThreshold = x
			default:
				if n, ok := toInt(x); ok {
					c.set.gcThreshold = float64(n)
				}
			}
		case "expandable_segments":
			c.set.expandable, _ = p.Value.(bool)
		case "per_process_memory_fraction":
			if f, ok := p.Value.(float64); ok && f > 0 && f < 1 && h.MemoryFraction == 0 {
				h.MemoryFraction = f
			}
		}
		h.AllocSettings[p.Key] = pyString(p.Value, 0)
	}
}
