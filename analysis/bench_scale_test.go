package analysis

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/allocator"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/synth"
)

// scaleSizes parses $FRAGSIM_BENCH_EVENTS: comma-separated event counts with
// an optional k, M or G suffix (default 1M).
func scaleSizes(b *testing.B) []int64 {
	spec := os.Getenv("FRAGSIM_BENCH_EVENTS")
	if spec == "" {
		spec = "1M"
	}
	var sizes []int64
	for _, s := range strings.Split(spec, ",") {
		s = strings.TrimSpace(s)
		mul := int64(1)
		switch {
		case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
			mul, s = 1_000, s[:len(s)-1]
		case strings.HasSuffix(s, "M"):
			mul, s = 1_000_000, s[:len(s)-1]
		case strings.HasSuffix(s, "G"):
			mul, s = 1_000_000_000, s[:len(s)-1]
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("FRAGSIM_BENCH_EVENTS: bad size %q", s)
		}
		sizes = append(sizes, n*mul)
	}
	return sizes
}

// synthTrace returns the bytes of a default synthetic trace (fragsim synth
// --seed 1) of about n events and its exact event count.
func synthTrace(b *testing.B, n int64) ([]byte, int64) {
	b.Helper()
	cfg := synth.DefaultConfig()
	cfg.Events = n
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, cfg.Header())
	if err != nil {
		b.Fatal(err)
	}
	st, err := synth.Generate(w, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes(), st.Events
}

// reportRate reports events per second of wall time, events being the events
// read per iteration.
func reportRate(b *testing.B, events int64) {
	b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkScale is the scale suite (bench/scale.sh times the same commands
// end to end): on a default synthetic trace of each size in
// $FRAGSIM_BENCH_EVENTS (default 1M; e.g. 1M,10M,100M), held in memory
// (about 1.5 bytes per event), it measures decoding every event, replay
// under each policy, Compare with its default policies and settings, and
// Cohost of the trace with itself started 1 s later on an H200. Import is
// trace/pytorch's BenchmarkImport.
func BenchmarkScale(b *testing.B) {
	for _, n := range scaleSizes(b) {
		data, events := synthTrace(b, n)
		open := opener(data)
		b.Run(fmt.Sprintf("events=%s/decode", scaleLabel(n)), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				r, err := trace.NewReader(bytes.NewReader(data))
				if err != nil {
					b.Fatal(err)
				}
				var got int64
				for {
					if _, err := r.ReadEvent(); err == io.EOF {
						break
					} else if err != nil {
						b.Fatal(err)
					}
					got++
				}
				if got != events {
					b.Fatalf("decoded %d events, want %d", got, events)
				}
			}
			reportRate(b, events)
		})
		for _, name := range allocator.Names() {
			b.Run(fmt.Sprintf("events=%s/replay/%s", scaleLabel(n), name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					r, _, err := open()
					if err != nil {
						b.Fatal(err)
					}
					f, err := allocator.NewFactory(name, "", r.Header())
					if err != nil {
						b.Fatal(err)
					}
					res, err := replay.Run(r, f, replay.Config{})
					if err != nil {
						b.Fatal(err)
					}
					if res.Events != events {
						b.Fatalf("replayed %d events, want %d", res.Events, events)
					}
				}
				reportRate(b, events)
			})
		}
		b.Run(fmt.Sprintf("events=%s/compare", scaleLabel(n)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, err := Compare(open, CompareOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if c.Trace.Events != events {
					b.Fatalf("compared %d events, want %d", c.Trace.Events, events)
				}
			}
			reportRate(b, events)
		})
		b.Run(fmt.Sprintf("events=%s/cohost", scaleLabel(n)), func(b *testing.B) {
			f, err := allocator.NewFactory("caching", "", nil)
			if err != nil {
				b.Fatal(err)
			}
			ps := []replay.Process{
				{Name: "a", Open: open, Factory: f},
				{Name: "b", Open: open, Factory: f, OffsetNS: 1e9},
			}
			cfg := replay.CohostConfig{CapacityBytes: 150109880320, ContextOverheadBytes: replay.DefaultContextOverheadBytes}
			b.ReportAllocs()
			for b.Loop() {
				res, err := replay.Cohost(ps, cfg)
				if err != nil {
					b.Fatal(err)
				}
				for _, p := range res.Processes {
					if p.Result.Events != events {
						b.Fatalf("process %s replayed %d events, want %d", p.Name, p.Result.Events, events)
					}
				}
			}
			reportRate(b, 2*events)
		})
	}
}

// scaleLabel writes n as 1M, 10M, 250k or n.
func scaleLabel(n int64) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000 && n%1_000 == 0:
		return fmt.Sprintf("%dk", n/1_000)
	}
	return strconv.FormatInt(n, 10)
}
