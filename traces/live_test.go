package traces_test

import (
	"io"
	"os"
	"strconv"
	"testing"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/analysis"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// request is what a program asked of its allocator: the kind, size and
// stream of one alloc or free.
type request struct {
	kind   trace.Kind
	size   uint64
	stream trace.StreamID
}

func requests(t *testing.T, path string) (*trace.Header, []request) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []request
	for {
		e, err := r.ReadEvent()
		if err == io.EOF {
			return r.Header(), out
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Kind == trace.KindAlloc || e.Kind == trace.KindFreeRequested {
			out = append(out, request{e.Kind, e.SizeBytes, e.Stream})
		}
	}
}

// TestLiveTracesMatchTheirSnapshots checks each trace recorded live with
// fragsim record against the PyTorch snapshot of the same seeded workload
// on the same GPU: the same requests in the same order (the recording goes
// on past the snapshot's dump with the frees at exit), and a replay under
// caching reaching the real run's peak reserved.
//
// The everyday pass checks the two smallest recordings (see longTests);
// the long pass (FRAGSIM_LONG=1) all four.
func TestLiveTracesMatchTheirSnapshots(t *testing.T) {
	names := []string{"baseline_s1", "shared_s1", "kv_decode_s1", "train_s1"}
	if !longTests() {
		names = names[:2]
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			live := name + ".live.fst"
			if _, err := os.Stat(live); err != nil {
				t.Fatal(err)
			}
			h, rec := requests(t, live)
			_, snap := requests(t, name+".fst")
			if h.Producer != "live" || h.GPUName != "NVIDIA H200" || h.Tags["wall_record_s"] == "" {
				t.Errorf("header %+v: want a live H200 recording with its wall time", h)
			}
			if len(rec) < len(snap) {
				t.Fatalf("%d requests recorded, the snapshot has %d", len(rec), len(snap))
			}
			for i := range snap {
				if rec[i] != snap[i] {
					t.Fatalf("request %d: recorded %+v, snapshot %+v", i, rec[i], snap[i])
				}
			}
			for i, r := range rec[len(snap):] {
				if r.kind != trace.KindFreeRequested {
					t.Fatalf("request %d after the snapshot's end is a %v, want only frees at exit", len(snap)+i, r.kind)
				}
			}

			f, err := trace.Open(live)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fac, err := allocator.NewFactory("caching", "", f.Header())
			if err != nil {
				t.Fatal(err)
			}
			res, err := replay.Run(f.Reader, fac, replay.Config{})
			if err != nil {
				t.Fatal(err)
			}
			real, err := strconv.ParseUint(h.Tags["real_reserved_peak"], 10, 64)
			if err != nil {
				t.Fatalf("real_reserved_peak tag: %v", err)
			}
			// A live trace has no segment addresses: new segments are laid
			// out as the CUDA driver does (replay.LayoutBase), which keeps best
			// fit's tie-breaks between equal blocks those of the real run.
			if res.PeakReservedBytes != real {
				t.Errorf("peak reserved %d, real run %d (%+d)", res.PeakReservedBytes, real, int64(res.PeakReservedBytes)-int64(real))
			}
		})
	}
}

// TestLiveBaselineVerdict checks that the live recording of the scenario
// gives the verdict of its snapshot: above 10% before, under 10% after,
// with expandable segments.
//
// The everyday pass weighs caching against expandable alone (see
// longTests); the long pass (FRAGSIM_LONG=1) against the default settings
// too (max_split_size_mb, roundup_power2_divisions, the garbage collection
// threshold, injected empty_cache calls: fourteen more replays), as
// fragsim compare does, and expandable must still come out best.
func TestLiveBaselineVerdict(t *testing.T) {
	var settings []analysis.Setting // nil: analysis.DefaultSettings
	if !longTests() {
		settings = []analysis.Setting{}
	}
	path := "baseline_s1.live.fst"
	open := func() (*trace.Reader, io.Closer, error) {
		f, err := trace.Open(path)
		if err != nil {
			return nil, nil, err
		}
		return f.Reader, f, nil
	}
	c, err := analysis.Compare(open, analysis.CompareOptions{Policies: []string{"caching", "expandable"}, Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	if c.BeforePct < 10 || c.AfterPct >= 10 || c.After != "expandable" {
		t.Errorf("verdict %s %.1f%% -> %s %.1f%%, want caching >= 10%% -> expandable < 10%%",
			c.Before, c.BeforePct, c.After, c.AfterPct)
	}
	if c.Cost == nil || c.Cost.Agree == nil {
		t.Errorf("cost verdict %+v: want the estimate beside the header's wall times", c.Cost)
	}
}
