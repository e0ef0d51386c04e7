package replay

import (
	"fmt"
	"regexp"
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

var (
	recordedCall = regexp.MustCompile(`recorded (\w+) (0x[0-9a-f]+)\+(\d+)`)
	replayedCall = regexp.MustCompile(`replayed (\w+) (0x[0-9a-f]+)\+(\d+)`)
)

// ExplainMismatch says in words which of the allocator's rules most likely
// diverged first, from a Fidelity.FirstMismatch, and what to try. Both are
// "" when first is.
func ExplainMismatch(first string) (rule, try string) {
	if first == "" {
		return "", ""
	}
	if strings.Contains(first, ": recorded at ") && strings.Contains(first, ", replayed at ") {
		return "block placement: the request was served from another block than in the real run " +
				"(the best-fit choice among free blocks, a block split, or a segment at another address)",
			"if every device event matches, only the addresses of the segments differ and the figures stand; " +
				"otherwise the first device mismatch below it is the cause"
	}
	rec := recordedCall.FindStringSubmatch(first)
	rep := replayedCall.FindStringSubmatch(first)
	kind := func(m []string) string {
		if m == nil {
			return ""
		}
		return m[1]
	}
	rk, pk := kind(rec), kind(rep)
	const sizing = "replay with the run's PYTORCH_CUDA_ALLOC_CONF (--conf; `fragsim info` shows the settings the trace recorded)"
	const capFlags = "give the run's memory cap: --fraction F (torch.cuda.set_per_process_memory_fraction) and " +
		"--capacity with the GPU's total"
	switch {
	case rk != "" && rk == pk && rec[3] != rep[3]:
		return "segment sizing: the request was rounded to another segment size (2 MiB small pool, 20 MiB large " +
			"buffer, 2 MiB rounding; max_split_size_mb, roundup_power2_divisions)", sizing
	case rk != "" && rk == pk:
		return "segment placement: the segment has the real size but the driver put it at another address " +
				"(the replay lays segments out itself)",
			"nothing for the figures: sizes and counts match; only addresses that follow differ"
	case (rk == "segment_alloc" || rk == "segment_map") && pk == "":
		return "block reuse: the replay served from a cached block a request for which the real allocator made a " +
				"new segment (a free that completed later in the real run, e.g. after record_stream on a busy " +
				"stream, or a block cached on another stream)",
			"check that the trace keeps its free_completed times and streams (an import without them frees at once)"
	case (pk == "segment_alloc" || pk == "segment_map") && rk == "":
		return "block reuse: the real allocator served from a cached block a request for which the replay made " +
				"a new segment (the replay released or split that block differently)",
			sizing
	case (rk == "segment_free" || rk == "segment_unmap") && pk == "":
		return "segment release: the real allocator released a cached segment the replay kept (empty_cache, " +
			"garbage_collection_threshold under a memory cap, or freeing the cache to retry a failed cudaMalloc)", capFlags
	case (pk == "segment_free" || pk == "segment_unmap") && rk == "":
		return "segment release: the replay released cached segments the real run kept (its cudaMalloc failed " +
			"sooner: the replay's capacity or memory fraction is below the run's)", capFlags
	case rk != "" && pk != "":
		return fmt.Sprintf("call order: the replay made a %s where the real allocator made a %s", pk, rk), sizing
	}
	return "the allocator's state diverged before this event", sizing
}
