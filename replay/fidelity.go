package replay

import (
	"fmt"
	"strings"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// deviceMismatch records the first device call that differs from the
// recorded events (kind Invalid: recorded events no call matched).
func (e *engine) deviceMismatch(d *device, kind trace.Kind, addr, size uint64) {
	if e.res.Fidelity.FirstMismatch != "" || !e.exact {
		return
	}
	var rec string
	if len(d.rec) > 0 {
		h := d.rec[0]
		rec = fmt.Sprintf("recorded %s %#x+%d", h.Kind, h.Addr, h.SizeBytes)
		if len(d.rec) > 1 {
			rec += fmt.Sprintf(" (and %d more)", len(d.rec)-1)
		}
	} else {
		rec = "no recorded device event"
	}
	var rep string
	if kind == trace.KindInvalid {
		rep = "the replay made no such call"
	} else {
		rep = fmt.Sprintf("replayed %s %#x+%d", kind, addr, size)
	}
	ev := e.ev
	if e.fastEvs != nil {
		ev = e.fastEvs[e.fastI]
	}
	ds, _ := e.device(d.id)
	e.res.Fidelity.FirstMismatch = fmt.Sprintf("event %d: %s of %d bytes on stream %#x: %s, %s; reserved %d%s",
		e.index-1, ev.Kind, ev.SizeBytes, uint64(ev.Stream), rec, rep, d.reserved, e.context(ds, ev.SizeBytes))
}

// context describes the free blocks of the policy near a request size.
func (e *engine) context(ds *devState, size uint64) string {
	if ds == nil {
		return ""
	}
	in, ok := ds.policy.(driver.Inspector)
	if !ok {
		return ""
	}
	type fb struct {
		addr, size uint64
		stream     trace.StreamID
	}
	var best []fb
	var nfree int
	in.Segments(func(s trace.Segment) bool {
		for _, b := range s.Blocks {
			if b.State != trace.BlockInactive {
				continue
			}
			nfree++
			if len(best) < 4 {
				best = append(best, fb{b.Addr, b.SizeBytes, s.Stream})
			} else {
				// keep the 4 closest in size
				worst, wd := -1, uint64(0)
				for i, x := range best {
					if d := absDiff(x.size, size); d > wd {
						worst, wd = i, d
					}
				}
				if absDiff(b.SizeBytes, size) < wd {
					best[worst] = fb{b.Addr, b.SizeBytes, s.Stream}
				}
			}
		}
		return true
	})
	if nfree == 0 {
		return "; no free blocks"
	}
	parts := make([]string, len(best))
	for i, b := range best {
		parts[i] = fmt.Sprintf("%#x+%d@%#x", b.addr, b.size, uint64(b.stream))
	}
	return fmt.Sprintf("; %d free blocks, nearest in size: %s", nfree, strings.Join(parts, " "))
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}
