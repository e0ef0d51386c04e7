package caching_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fragsim/fragsim/allocator/caching"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// textTrace encodes the text trace testdata/name (fragsim dump's form),
// with its header's producer replaced by producer when not empty.
func textTrace(t testing.TB, name, producer string) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := trace.NewTextReader(f)
	if err != nil {
		t.Fatal(err)
	}
	h := *tr.Header()
	if producer != "" {
		h.Producer = producer
	}
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.CopyTo(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// replayWith replays the encoded trace data under the caching allocator
// configured by conf ("" for the trace's recorded settings).
func replayWith(t testing.TB, data []byte, conf string, cfg replay.Config) *replay.Result {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	f := func(dev driver.Device, h *trace.Header) (driver.Policy, error) {
		c, err := caching.FromHeader(h)
		if err != nil {
			return nil, err
		}
		if conf != "" {
			if c, err = caching.ParseConf(conf); err != nil {
				return nil, err
			}
		}
		return caching.New(dev, c)
	}
	res, err := replay.Run(r, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestDeferredFree replays frees that complete after later requests, as
// PyTorch records a block freed after record_stream onto a busy stream:
// the block stays active, and unavailable to those requests, until its
// free_completed.
func TestDeferredFree(t *testing.T) {
	for _, producer := range []string{"", trace.ProducerSynthetic} {
		// deferred_free.txt: a 790,075-byte block freed, a 1,000-byte
		// alloc, then the first free completes.
		res := replayWith(t, textTrace(t, "deferred_free.txt", producer), "", replay.Config{})
		if res.PeakActiveBytes != 790528+1024 || res.DeviceAllocs != 1 {
			t.Errorf("producer %q: peak active %d, %d device allocs; want both blocks active at once (%d), in one segment",
				producer, res.PeakActiveBytes, res.DeviceAllocs, 790528+1024)
		}
	}
	// deferred_reuse.txt: a block freed while a request of its size is
	// served; freed at once, the request would take its address.
	res := replayWith(t, textTrace(t, "deferred_reuse.txt", ""), "", replay.Config{})
	fd := res.Fidelity
	if !fd.Checked || fd.Allocs != 4 || fd.AllocsAtRecordedAddress != 4 || fd.DeviceEventsMatched != 1 {
		t.Errorf("allocs at recorded address %d/%d, device events %d (checked %v): %s",
			fd.AllocsAtRecordedAddress, fd.Allocs, fd.DeviceEventsMatched, fd.Checked, fd.FirstMismatch)
	}
}

// strip returns the encoded trace data without its device events. It
// streams the events from reader to writer: holding them all (a slice of
// hundreds of thousands grown by doubling) made the race detector's
// bookkeeping of the freed slices most of the what-if test's cost.
func strip(t testing.TB, data []byte) []byte {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, r.Header())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		e, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case trace.KindSegmentAlloc, trace.KindSegmentFree, trace.KindSegmentMap, trace.KindSegmentUnmap:
			n++
			continue
		}
		e.Text, e.Stack = 0, 0
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no device events to strip")
	}
	return buf.Bytes()
}

// TestWhatIfIgnoresRecordedEvents replays real traces under settings other
// than their recorded ones, with and without their device events: a
// what-if depends on the requests alone, so both give the same result
// (the event count and indexes aside, which count the device events, and
// the time-weighted fragmentation to 1e-4 points, since device events
// carry times of their own).
func TestWhatIfIgnoresRecordedEvents(t *testing.T) {
	dir, runs := readRuns(t)
	cases := []struct{ trace, conf string }{
		{"empty_cache", "expandable_segments:True"},
		{"empty_cache", "max_split_size_mb:64,roundup_power2_divisions:4"},
		{"streams", "max_split_size_mb:64,roundup_power2_divisions:4"},
		{"gc_threshold", "garbage_collection_threshold:0.6,max_split_size_mb:128"},
		{"expandable", "max_split_size_mb:64"},
	}
	for _, c := range cases {
		run := runs[c.trace]
		data, err := os.ReadFile(run.path(dir, c.trace))
		if err != nil {
			t.Fatal(err)
		}
		cfg := replay.Config{CapacityBytes: run.TotalGlobalMem, Fraction: run.Fraction}
		full := replayWith(t, data, c.conf, cfg)
		bare := replayWith(t, strip(t, data), c.conf, cfg)
		if full.Fidelity.Checked {
			t.Errorf("%s under %s: fidelity checked in a what-if", c.trace, c.conf)
		}
		if d := full.Fragmentation.TimeWeightedPct - bare.Fragmentation.TimeWeightedPct; d > 1e-4 || d < -1e-4 {
			t.Errorf("%s under %s: time-weighted fragmentation %v with device events, %v without",
				c.trace, c.conf, full.Fragmentation.TimeWeightedPct, bare.Fragmentation.TimeWeightedPct)
		}
		for _, r := range []*replay.Result{full, bare} {
			r.Events, r.Fragmentation.PeakIndex, r.Fragmentation.TimeWeightedPct = 0, 0, 0
			for i := range r.OOMEvents {
				r.OOMEvents[i].Index = 0
			}
		}
		if !reflect.DeepEqual(full, bare) {
			t.Errorf("%s under %s:\nwith device events    %+v\nwithout device events %+v", c.trace, c.conf, *full, *bare)
		}
	}
}

// TestHugeRequests replays one request of S bytes, then its free, on a
// device of no set capacity (64 TiB): a request the policy cannot place
// is refused as an OOM, with no rounding overflow and no panic, and one
// it can place is served whole.
func TestHugeRequests(t *testing.T) {
	const maxU = ^uint64(0)
	cases := []struct {
		size   uint64
		conf   string
		served bool
	}{
		{1 << 40, "", true},
		{1 << 40, "expandable_segments:True", true},
		{1 << 47, "", false},
		{1 << 47, "expandable_segments:True", false},
		{1 << 62, "", false},
		{1 << 62, "expandable_segments:True", false},
		{maxU, "", false},
		{maxU, "expandable_segments:True", false},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		w, err := trace.NewWriter(&buf, &trace.Header{Producer: trace.ProducerSynthetic})
		if err != nil {
			t.Fatal(err)
		}
		const addr = 0x7f0000000000
		for _, e := range []trace.Event{
			{Kind: trace.KindAlloc, TimeNS: 1, Addr: addr, SizeBytes: c.size},
			{Kind: trace.KindFreeRequested, TimeNS: 2, Addr: addr, SizeBytes: c.size},
			{Kind: trace.KindFreeCompleted, TimeNS: 2, Addr: addr, SizeBytes: c.size},
			{Kind: trace.KindAlloc, TimeNS: 3, Addr: addr, SizeBytes: 4096},
		} {
			if err := w.WriteEvent(e); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		res := replayWith(t, buf.Bytes(), c.conf, replay.Config{})
		name := fmt.Sprintf("S=%#x %q", c.size, c.conf)
		if c.served {
			if res.OOMs != 0 || res.PeakActiveBytes < c.size || res.PeakReservedBytes < c.size {
				t.Errorf("%s: %d OOMs, peak active %d, peak reserved %d: not served whole", name, res.OOMs, res.PeakActiveBytes, res.PeakReservedBytes)
			}
			continue
		}
		if res.OOMs != 1 || len(res.OOMEvents) != 1 || res.OOMEvents[0].SizeBytes != c.size || res.PeakReservedBytes > 64<<30 {
			t.Errorf("%s: %d OOMs (%+v), peak reserved %d: want the request refused as an OOM", name, res.OOMs, res.OOMEvents, res.PeakReservedBytes)
		}
		if res.Allocs != 2 || res.PeakActiveBytes != 4096 {
			t.Errorf("%s: %d allocs, peak active %d: the next request was not served", name, res.Allocs, res.PeakActiveBytes)
		}
	}
}

// TestExpandableBases replays expandable segments whose recorded ranges
// lie in either order (the small pool's above the large pool's, and
// below), on a device of no set capacity, whose ranges are larger than the
// recorded device's, and on the recorded device: every range gets its
// recorded base, and every allocation its recorded address.
func TestExpandableBases(t *testing.T) {
	for _, name := range []string{"expandable_order.txt", "expandable_order_small_first.txt"} {
		for _, capacity := range []uint64{0, 150109880320} {
			res := replayWith(t, textTrace(t, name, ""), "", replay.Config{CapacityBytes: capacity})
			fd := res.Fidelity
			if !fd.Checked || fd.Allocs == 0 || fd.AllocsAtRecordedAddress != fd.Allocs || fd.DeviceEventsMatched != fd.DeviceEvents {
				t.Errorf("%s, capacity %d: allocs at recorded address %d/%d, device events %d/%d: %s",
					name, capacity, fd.AllocsAtRecordedAddress, fd.Allocs, fd.DeviceEventsMatched, fd.DeviceEvents, fd.FirstMismatch)
			}
		}
	}
}
