package analysis

import (
	"fmt"
	"io"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// RecordHint says how to record what a what-if replays: a snapshot taken
// without the allocation history holds only the allocator's state.
const RecordHint = "What-ifs need the allocations, not only the state: call " +
	"torch.cuda.memory._record_memory_history(max_entries=1_000_000) at the start of the run and " +
	"torch.cuda.memory._dump_snapshot(\"run.pickle\") at the end, then `fragsim import run.pickle`."

// StateReport describes the allocator state a state-only snapshot holds:
// what torch.cuda.memory_snapshot() gives without the allocation history.
type StateReport struct {
	Segments      int     `json:"segments"`
	ReservedBytes uint64  `json:"reserved_bytes"`
	ActiveBytes   uint64  `json:"active_bytes"` // allocated and pending-free blocks
	AtPeakPct     float64 `json:"at_peak_pct"`  // 100·(1 − active/reserved) of this state
	// LargestFreeBytes is the largest free block: the largest request the
	// cache serves without a new segment.
	LargestFreeBytes uint64 `json:"largest_free_bytes"`
	// StrandedBytes are free bytes in segments that also hold live blocks:
	// empty_cache cannot return them.
	StrandedBytes uint64         `json:"stranded_bytes"`
	FreeHist      *FreeHistogram `json:"free_hist"`
	// Hint says how to record a trace whose what-ifs can be replayed.
	Hint string `json:"hint"`
}

// StateOnly reports whether a trace is a state-only snapshot: an initial
// state and no events.
func StateOnly(h *trace.Header, events int64) bool {
	return events == 0 && h != nil && h.Initial != nil && len(h.Initial.Segments) > 0
}

// StateOf describes the initial state of the trace header (nil when it
// has none).
func StateOf(h *trace.Header) *StateReport {
	if h == nil || h.Initial == nil || len(h.Initial.Segments) == 0 {
		return nil
	}
	s := &StateReport{Segments: len(h.Initial.Segments), Hint: RecordHint}
	for _, seg := range h.Initial.Segments {
		s.ReservedBytes += seg.SizeBytes
		for _, b := range seg.Blocks {
			if b.State == trace.BlockInactive {
				s.LargestFreeBytes = max(s.LargestFreeBytes, b.SizeBytes)
			} else {
				s.ActiveBytes += b.SizeBytes
			}
		}
	}
	s.AtPeakPct = FragPct(s.ReservedBytes, s.ActiveBytes)
	s.FreeHist = FreeHistogramOf(h.Initial.Segments)
	s.FreeHist.ReservedBytes, s.FreeHist.ActiveBytes = s.ReservedBytes, s.ActiveBytes
	s.StrandedBytes = s.FreeHist.StrandedBytes
	return s
}

// ApplyState reports the state as a replay's peak: a replay of a
// state-only snapshot has no events, and its one moment is the state.
func (s *StateReport) ApplyState(res *replay.Result) {
	if s == nil || res == nil {
		return
	}
	res.PeakReservedBytes = max(res.PeakReservedBytes, s.ReservedBytes)
	res.PeakActiveBytes = max(res.PeakActiveBytes, s.ActiveBytes)
	res.PeakAllocatedBytes = max(res.PeakAllocatedBytes, s.ActiveBytes)
	fr := &res.Fragmentation
	fr.AtPeakPct, fr.PeakRatioPct, fr.TimeWeightedPct = s.AtPeakPct, s.AtPeakPct, s.AtPeakPct
	fr.StrandedBytes, fr.MaxStrandedBytes = s.StrandedBytes, s.StrandedBytes
	if free := s.ReservedBytes - s.ActiveBytes; free > 0 {
		fr.ExternalPct = 100 * (1 - float64(s.LargestFreeBytes)/float64(free))
	}
	if s.ActiveBytes > 0 {
		fr.OverheadRatio = float64(s.ReservedBytes) / float64(s.ActiveBytes)
	}
}

// Lines describes the state in a few lines for the text reports.
func (s *StateReport) Lines() []string {
	lines := []string{
		fmt.Sprintf("Snapshot state (no events): %d segments, reserved %s, active %s, at_peak_pct %.1f%%",
			s.Segments, FmtBytes(s.ReservedBytes), FmtBytes(s.ActiveBytes), s.AtPeakPct),
		fmt.Sprintf("Largest free block %s; stranded %s (free bytes in segments that hold live blocks: "+
			"empty_cache cannot return them)", FmtBytes(s.LargestFreeBytes), FmtBytes(s.StrandedBytes)),
	}
	if h := s.FreeHist; h != nil && len(h.Bins) > 0 {
		lines = append(lines, "Free blocks by size:")
		for _, b := range h.Bins {
			if b.Blocks == 0 {
				continue
			}
			lines = append(lines, fmt.Sprintf("  %-22s %6s blocks %11s, stranded %s", SizeClassLabel(b.Log2),
				fmtCount(b.Blocks), FmtBytes(b.Bytes), FmtBytes(b.StrandedBytes)))
		}
	}
	return lines
}

// WriteText writes the state and the hint, wrapped to TableWidth.
func (s *StateReport) WriteText(w io.Writer) {
	for _, l := range s.Lines() {
		if len([]rune(l)) > TableWidth {
			l = wrap(l, TableWidth)
		}
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, wrap(s.Hint, TableWidth))
}

// stateOnly turns a decision over the replays of a state-only snapshot
// (which have no events to differ by) into no recommendation, saying why.
func (s *StateReport) stateOnly(d *Decision) {
	if d == nil {
		return
	}
	for i := range d.Results {
		d.Results[i].Recommended = false
	}
	d.Recommendation = &Recommendation{Goal: d.Goal.String(), BaselinePeakReservedBytes: s.ReservedBytes,
		PeakReservedBytes: s.ReservedBytes, AtPeakPct: s.AtPeakPct, BaselineAtPeakPct: s.AtPeakPct,
		Line: "Recommended: none yet: the snapshot holds the allocator's state and no events to replay; " +
			"record them with torch.cuda.memory._record_memory_history(max_entries=1_000_000)"}
}
