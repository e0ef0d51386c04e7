package caching_test

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/fragsim/fragsim/allocator/caching"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/synth"
)

// recDevice is a device that writes every call as a recorded device event.
// With limit set, it holds at most limit bytes, as when other processes
// hold the rest of the GPU (the trace does not show it).
type recDevice struct {
	next, total uint64
	frac        float64
	limit       uint64
	reserved    uint64
	peak        uint64
	out         []trace.Event
}

func (d *recDevice) Cap() (uint64, bool) {
	if d.frac > 0 && d.frac < 1 {
		return uint64(d.frac * float64(d.total)), true
	}
	return 0, false
}
func (d *recDevice) TotalBytes() uint64 { return d.total }
func (d *recDevice) grow(n uint64) {
	d.reserved += n
	d.peak = max(d.peak, d.reserved)
}
func (d *recDevice) Malloc(size uint64, s trace.StreamID) (uint64, bool) {
	if a, ok := d.Cap(); ok && d.reserved+size > a || d.over(size) {
		return 0, false
	}
	addr := d.next
	d.next += (size + 2<<20 - 1) &^ (2<<20 - 1)
	d.grow(size)
	d.out = append(d.out, trace.Event{Kind: trace.KindSegmentAlloc, Addr: addr, SizeBytes: size, Stream: s})
	return addr, true
}
func (d *recDevice) Free(addr, size uint64) {
	d.reserved -= size
	d.out = append(d.out, trace.Event{Kind: trace.KindSegmentFree, Addr: addr, SizeBytes: size})
}
func (d *recDevice) Reserve(size uint64, _ trace.StreamID) uint64 {
	a := d.next
	d.next += size
	return a
}
func (d *recDevice) over(size uint64) bool { return d.limit > 0 && d.reserved+size > d.limit }
func (d *recDevice) Map(addr, size uint64) bool {
	if d.over(size) {
		return false
	}
	d.grow(size)
	d.out = append(d.out, trace.Event{Kind: trace.KindSegmentMap, Addr: addr, SizeBytes: size})
	return true
}
func (d *recDevice) Unmap(addr, size uint64) {
	d.reserved -= size
	d.out = append(d.out, trace.Event{Kind: trace.KindSegmentUnmap, Addr: addr, SizeBytes: size})
}
func (d *recDevice) Recorded() []trace.Event { return nil }

func synthEvents(t testing.TB, n int64, streams bool) []trace.Event {
	t.Helper()
	cfg := synth.DefaultConfig()
	cfg.Events = n
	cfg.Stacks = false
	cfg.StreamPerAgent = streams
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, cfg.Header())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := synth.Generate(w, cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, evs, err := trace.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// record serves evs with the allocator under cfg and returns the trace the
// real allocator would have written: device events before the request
// that caused them, and addresses as served. It also returns the peak reserved.
// With limit set, the device holds at most limit bytes (see recDevice).
func record(t testing.TB, evs []trace.Event, cfg caching.Config, total uint64, frac float64, emptyEvery int, limit uint64) ([]trace.Event, uint64) {
	t.Helper()
	dev := &recDevice{next: 0x7f1000000000, total: total, frac: frac, limit: limit}
	a, err := caching.New(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := map[uint64]driver.Block{}
	out := make([]trace.Event, 0, len(evs)+len(evs)/4)
	flush := func(e trace.Event) {
		out = append(out, dev.out...)
		dev.out = dev.out[:0]
		out = append(out, e)
	}
	allocs := 0
	dropped := map[uint64]bool{}
	for _, e := range evs {
		e.Text, e.Stack = 0, 0
		if (e.Kind == trace.KindFreeRequested || e.Kind == trace.KindFreeCompleted) && dropped[e.Addr] {
			if e.Kind == trace.KindFreeCompleted {
				delete(dropped, e.Addr)
			}
			continue
		}
		switch e.Kind {
		case trace.KindAlloc:
			b, err := a.Malloc(e.SizeBytes, e.Stream)
			if err != nil {
				// PyTorch records an oom entry and no alloc.
				dropped[e.Addr] = true
				flush(trace.Event{Kind: trace.KindOOM, SizeBytes: cfg.RoundSize(e.SizeBytes), Stream: e.Stream})
				continue
			}
			addr[e.Addr] = b
			e.Addr = b.Addr
			flush(e)
			allocs++
			if emptyEvery > 0 && allocs%emptyEvery == 0 {
				a.EmptyCache()
				flush(trace.Event{Kind: trace.KindEmptyCache})
			}
		case trace.KindFreeRequested:
			b := addr[e.Addr]
			e.Addr = b.Addr
			a.FreeRequested(b)
			flush(e)
		case trace.KindFreeCompleted:
			orig := e.Addr
			b := addr[orig]
			e.Addr = b.Addr
			delete(addr, orig)
			a.FreeCompleted(b)
			flush(e)
		default:
			flush(e)
		}
	}
	return out, dev.peak
}

func encode(t testing.TB, h *trace.Header, evs []trace.Event) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func factory(cfg caching.Config) driver.Factory {
	return func(dev driver.Device, h *trace.Header) (driver.Policy, error) {
		return caching.New(dev, cfg)
	}
}

// TestReplayReproducesRecording records synthetic workloads with the
// allocator itself, under several settings, and checks that the engine's
// replay of the recording puts every allocation and device event where
// the recording has it: workloads of 15,000 events in the everyday pass,
// of 120,000 in the long pass (FRAGSIM_LONG=1, without the race
// detector). The caps and other processes' memory are set from the
// workload's own peak, so that they bite at either size.
func TestReplayReproducesRecording(t *testing.T) {
	const total = 150109880320
	n := int64(15_000)
	if longTests() {
		n = 120_000
	}
	evs := synthEvents(t, n, false)
	multi := synthEvents(t, n, true)
	_, peak := record(t, evs, caching.DefaultConfig(), total, 0, 0, 0)
	// caps below the uncapped peak force releases, retries and OOMs
	tight := float64(peak) * 0.8 / total
	loose := float64(peak) * 0.95 / total
	// so does memory other processes hold, which the trace does not show
	others := peak * 8 / 10
	cases := []struct {
		name  string
		conf  string
		frac  float64
		evs   []trace.Event
		empty int
		limit uint64
	}{
		{"default", "", 0, evs, 0, 0},
		{"max_split+divisions", "max_split_size_mb:64,roundup_power2_divisions:[1:4,64:8,>:2]", 0, evs, 0, 0},
		{"max_split under fraction", "max_split_size_mb:40", tight, evs, 0, 0},
		{"streams", "", 0, multi, 0, 0},
		{"empty_cache", "", 0, evs, 50, 0},
		{"fraction", "", tight, evs, 0, 0},
		{"fraction loose", "", loose, evs, 0, 0},
		{"gc under fraction", "garbage_collection_threshold:0.5", loose, evs, 0, 0},
		{"expandable", "expandable_segments:True", 0, multi, 0, 0},
		{"expandable+empty_cache", "expandable_segments:True", 0, evs, 40, 0},
		{"expandable+fraction", "expandable_segments:True", tight, evs, 0, 0},
		{"others' memory", "", 0, evs, 0, others},
		{"others' memory, max_split", "max_split_size_mb:40", 0, evs, 0, others},
		{"others' memory, expandable", "expandable_segments:True", 0, evs, 0, others},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := caching.ParseConf(c.conf)
			if err != nil {
				t.Fatal(err)
			}
			rec, peak := record(t, c.evs, cfg, total, c.frac, c.empty, c.limit)
			h := &trace.Header{Producer: trace.ProducerPyTorch, AllocConf: c.conf, GPUTotalBytes: total, MemoryFraction: c.frac}
			data := encode(t, h, rec)
			r, err := trace.NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			res, err := replay.Run(r, factory(cfg), replay.Config{})
			if err != nil {
				t.Fatal(err)
			}
			fd := res.Fidelity
			if !fd.Checked || fd.AllocsAtRecordedAddress != fd.Allocs || fd.Allocs == 0 ||
				fd.DeviceEventsMatched != fd.DeviceEvents || fd.DeviceEvents == 0 || fd.FirstMismatch != "" {
				t.Fatalf("fidelity %+v", fd)
			}
			if res.PeakReservedBytes != peak {
				t.Fatalf("peak reserved %d, recorded %d", res.PeakReservedBytes, peak)
			}
			if c.limit > 0 && (res.OOMs == 0 || res.AllocRetries == 0) {
				t.Fatalf("%d OOMs and %d retries: the limit did not bite", res.OOMs, res.AllocRetries)
			}
			t.Logf("%d events, %d allocs, %d device events, peak %d, %d retries, %d OOMs", res.Events, fd.Allocs, fd.DeviceEvents, peak, res.AllocRetries, res.OOMs)
		})
	}
}

// BenchmarkReplayCaching replays a synthetic recording of about a million
// events (with its device events) through the caching allocator, decoding
// included; events/s is the figure to watch.
func BenchmarkReplayCaching(b *testing.B) {
	cfg := caching.DefaultConfig()
	benchOnce.Do(func() {
		evs := synthEvents(b, 1_000_000, false)
		rec, _ := record(b, evs, cfg, 150109880320, 0, 0, 0)
		benchData = encode(b, &trace.Header{Producer: trace.ProducerPyTorch, GPUTotalBytes: 150109880320}, rec)
	})
	data := benchData
	runtime.GC()
	b.ResetTimer()
	var n int64
	for i := 0; i < b.N; i++ {
		r, err := trace.NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		res, err := replay.Run(r, factory(cfg), replay.Config{})
		if err != nil {
			b.Fatal(err)
		}
		n += res.Events
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

var (
	benchOnce sync.Once
	benchData []byte
)

// BenchmarkDecodeOnly reads the benchmark trace without replaying it: the
// floor under BenchmarkReplayCaching.
func BenchmarkDecodeOnly(b *testing.B) {
	BenchmarkReplayCaching(&testing.B{N: 0})
	data := benchData
	b.ResetTimer()
	var n int64
	buf := make([]trace.Event, 4096)
	for i := 0; i < b.N; i++ {
		r, err := trace.NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		for {
			k, err := r.ReadEvents(buf)
			n += int64(k)
			if err != nil {
				break
			}
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkReplayMemory replays synthetic recordings of 100k and 1M events
// and reports the largest heap seen during the replay: it stays flat as
// the trace grows, since the engine holds only the live blocks.
func BenchmarkReplayMemory(b *testing.B) {
	for _, n := range []int64{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			evs := synthEvents(b, n, false)
			cfg := caching.DefaultConfig()
			rec, _ := record(b, evs, cfg, 150109880320, 0, 0, 0)
			data := encode(b, &trace.Header{Producer: trace.ProducerPyTorch, GPUTotalBytes: 150109880320}, rec)
			evs, rec = nil, nil
			var peak uint64
			var ms runtime.MemStats
			obs := replay.Config{Observer: func(s *replay.Sample) {
				if s.Index&(1<<16-1) == 0 {
					runtime.ReadMemStats(&ms)
					peak = max(peak, ms.HeapAlloc)
				}
			}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				runtime.GC()
				r, err := trace.NewReader(bytes.NewReader(data))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := replay.Run(r, factory(cfg), obs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(peak-uint64(len(data))), "peak-heap-bytes")
		})
	}
}
