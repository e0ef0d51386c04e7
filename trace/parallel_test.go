package trace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// TestConcurrencySameBytes checks that a writer compressing chunks on
// other goroutines writes the same file, byte for byte, as one that does
// not, with many small chunks, table-only chunks and Flush calls.
func TestConcurrencySameBytes(t *testing.T) {
	for _, chunk := range []int{1, 7, 300, DefaultChunkEvents} {
		// The sequential file, written and read back once: the concurrent
		// writers' files are its bytes.
		want, evs, _ := writeRandom(t, 5, 5000, ChunkEvents(chunk), ChunkBytes(4096))
		if n, _, err := readBack(want, nil); err != nil || n != len(evs) {
			t.Fatalf("chunk %d: read %d events, %v; want %d", chunk, n, err, len(evs))
		}
		for _, workers := range []int{2, 3, 8} {
			got, _, _ := writeRandom(t, 5, 5000, ChunkEvents(chunk), ChunkBytes(4096), Concurrency(workers))
			if !bytes.Equal(got, want) {
				t.Fatalf("chunk %d, %d workers: %d bytes differ from the sequential %d", chunk, workers, len(got), len(want))
			}
		}
	}
	// Flush puts everything written so far into the io.Writer.
	var seq, par bytes.Buffer
	ws, _ := NewWriter(&seq, testHeader(), ChunkEvents(10))
	wp, _ := NewWriter(&par, testHeader(), ChunkEvents(10), Concurrency(4))
	rs, rp := rand.New(rand.NewPCG(9, 1)), rand.New(rand.NewPCG(9, 1))
	for i := range 5 {
		randomTrace(rs, ws, 100*i+3)
		randomTrace(rp, wp, 100*i+3)
		if err := ws.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := wp.Flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(par.Bytes(), seq.Bytes()) {
			t.Fatalf("after Flush %d: %d bytes written, want %d", i, par.Len(), seq.Len())
		}
	}
	if err := wp.Close(); err != nil {
		t.Fatal(err)
	}
}

type failingWriter struct{ n, limit int }

var errDiskFull = errors.New("disk full")

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n+len(p) > f.limit {
		return 0, errDiskFull
	}
	f.n += len(p)
	return len(p), nil
}

// TestConcurrencyWriteError checks that a write error of a chunk
// compressed on another goroutine is returned, by Close at the latest.
func TestConcurrencyWriteError(t *testing.T) {
	w, err := NewWriter(&failingWriter{limit: 2000}, testHeader(), ChunkEvents(50), Concurrency(2))
	if err != nil {
		t.Fatal(err)
	}
	// The error comes back from WriteEvent (a later chunk) or Flush.
	var werr error
	for i := 0; i < 100000 && werr == nil; i++ {
		werr = w.WriteEvent(Event{Kind: KindAlloc, TimeNS: int64(i) * 977, Addr: uint64(i) * 0x9e3779b97f4a7c15, SizeBytes: 512})
		if werr == nil && i%1000 == 999 {
			werr = w.Flush()
		}
	}
	if !errors.Is(werr, errDiskFull) {
		t.Fatalf("Flush returned %v, want %v", werr, errDiskFull)
	}
	if err := w.Close(); !errors.Is(err, errDiskFull) {
		t.Fatalf("Close returned %v, want %v", err, errDiskFull)
	}
}

// TestWriteEventsSameBytes checks that WriteEvents, given events in
// batches of any size, and WriteRange, given ranges of them between
// single WriteEvents, write what WriteEvent writes given them one by one:
// the same chunks, cut at the same events (four of the seven option sets
// in the everyday pass, all with FRAGSIM_LONG=1).
func TestWriteEventsSameBytes(t *testing.T) {
	// About 7,600 events: more than one chunk of 5,000, and the 5,800 of
	// invalidAt.
	_, all, _ := writeRandom(t, 11, 10000)
	var evs []Event
	for _, e := range all {
		if e.Text == NoString && e.Stack == NoStack {
			evs = append(evs, e)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	defer func(w, b, rb int) { scanWindow, measureBatch, rangeBatch = w, b, rb }(scanWindow, measureBatch, rangeBatch)
	for c, opts := range [][]WriterOption{
		{ChunkEvents(300), ChunkBytes(2048)},
		{ChunkEvents(5000), ChunkBytes(4096), Concurrency(3)},
		{ChunkEvents(5000), ChunkBytes(40960), Concurrency(4)},
		{ChunkEvents(200), ChunkBytes(40960), Concurrency(2)},
		{},
		{ChunkEvents(300), ChunksByEvents(), Concurrency(3)},
		{ChunkEvents(5000), ChunkBytes(2048), ChunksByEvents(), Concurrency(4)},
	} {
		// The everyday pass writes with small chunks (0), many
		// compressors and a small scan window measured an event at a
		// time (2), the defaults (4) and chunks by events with ranges
		// encoded 64 events at a time (5); the long pass (FRAGSIM_LONG=1)
		// with every option set.
		if !longTests() && (c == 1 || c == 3 || c == 6) {
			continue
		}
		scanWindow = []int{1 << 16, 1 << 16, 777, 5000, 1 << 16, 1 << 16, 777}[c]
		measureBatch = []int{1 << 10, 13, 1, 1 << 10, 100, 7, 1 << 10}[c]
		// A range's whole chunks are encoded a batch at a time: several
		// to a chunk, one, and a chunk's worth and more.
		rangeBatch = []int{1 << 10, 1 << 10, 1 << 10, 1 << 10, 1 << 10, 64, 1 << 10}[c]
		var one, batch, ranged bytes.Buffer
		w1, _ := NewWriter(&one, testHeader(), opts...)
		wb, _ := NewWriter(&batch, testHeader(), opts...)
		wr, _ := NewWriter(&ranged, testHeader(), opts...)
		for _, e := range evs {
			if err := w1.WriteEvent(e); err != nil {
				t.Fatal(err)
			}
		}
		for rest := evs; len(rest) > 0; {
			k := min(len(rest), r.IntN(700))
			if err := wb.WriteEvents(rest[:k]); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		if err := w1.Close(); err != nil {
			t.Fatal(err)
		}
		if err := wb.Close(); err != nil {
			t.Fatal(err)
		}
		if len(evs) < 7000 || !bytes.Equal(one.Bytes(), batch.Bytes()) {
			t.Fatalf("%d events: %d bytes in batches, %d one by one", len(evs), batch.Len(), one.Len())
		}
		// WriteRange's fill may run on other goroutines: count its calls.
		var calls atomic.Int64
		for rest := evs; len(rest) > 0; {
			k := min(len(rest), r.IntN(15000))
			if r.IntN(3) == 0 {
				k = min(len(rest), 1)
				if err := wr.WriteEvent(rest[0]); err != nil {
					t.Fatal(err)
				}
			} else if err := wr.WriteRange(k, func(dst []Event, i int) {
				calls.Add(1)
				copy(dst, rest[i:i+len(dst)])
			}); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		if err := wr.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(one.Bytes(), ranged.Bytes()) || calls.Load() == 0 {
			t.Fatalf("WriteRange: %d bytes, %d one by one (%d fills)", ranged.Len(), one.Len(), calls.Load())
		}
	}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, testHeader())
	if err := w.WriteEvents([]Event{{Kind: KindAlloc}, {Kind: 200}}); err == nil || !strings.Contains(err.Error(), "event 1: invalid kind") {
		t.Fatalf("invalid kind: %v", err)
	}
	// (A buffer for each writer: a writer with Concurrency writes on
	// another goroutine.)
	var buf2 bytes.Buffer
	w, _ = NewWriter(&buf2, testHeader(), Concurrency(2))
	err := w.WriteRange(3, func(dst []Event, i int) {
		for j := range dst {
			dst[j] = Event{Kind: KindAlloc}
			if i+j == 2 {
				dst[j].Kind = 200
			}
		}
	})
	if err == nil || !strings.Contains(err.Error(), "event 2: invalid kind") {
		t.Fatalf("WriteRange, invalid kind: %v", err)
	}
	// Deep in a range measured in several windows, or in chunks the
	// compressors check (ChunksByEvents): the error WriteEvent gives, at
	// the same event, and the same file once the writer goes on. Invalid
	// events in a whole chunk, in two, and in the chunk in progress (5,000
	// events in whole chunks, 300 in the chunk in progress).
	// The everyday pass writes each place with one of the writers, in
	// turn; the long pass with each.
	scanWindow, measureBatch = 777, 50
	for i, at := range [][]int{{3333}, {4999}, {2100, 1500}, {1000}, {0}, {4500, 3999}, {5200}, {5299, 4999}} {
		bad, rest, buf3, want := invalidAt(t, evs, at)
		for k, opts := range [][]WriterOption{{ChunkEvents(1000), Concurrency(3)}, {ChunkEvents(1000), ChunksByEvents(), Concurrency(3)}, {ChunkEvents(1000), ChunksByEvents(), Concurrency(2)}} {
			if !longTests() && k != i%3 {
				continue
			}
			rangeBatch = []int{1 << 10, 1 << 10, 99}[k] // the invalid event in a chunk's first, middle or last batch
			var out bytes.Buffer
			wr, _ := NewWriter(&out, testHeader(), opts...)
			got := wr.WriteRange(len(bad), func(dst []Event, i int) { copy(dst, bad[i:]) })
			if want == nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("invalid at %v: WriteRange: %v, WriteEvent: %v", at, got, want)
			}
			if err := wr.WriteRange(len(rest), func(dst []Event, i int) { copy(dst, rest[i:]) }); err != nil {
				t.Fatal(err)
			}
			if err := wr.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), buf3.Bytes()) {
				t.Fatalf("invalid at %v: after the error, WriteRange wrote %d bytes, WriteEvent %d", at, out.Len(), buf3.Len())
			}
		}
	}
}

// invalidAt returns the first 5,300 events of evs with those at the
// indexes at made invalid, the 500 events after them, and what WriteEvent
// writes of both, event by event, in chunks of 1,000 events: the events
// up to the first invalid one, whose error it returns, then the rest.
func invalidAt(t *testing.T, evs []Event, at []int) (bad, rest []Event, ref *bytes.Buffer, want error) {
	t.Helper()
	bad = append([]Event(nil), evs[:5300]...)
	for _, a := range at {
		bad[a].Kind = 200
	}
	ref = new(bytes.Buffer)
	w, _ := NewWriter(ref, testHeader(), ChunkEvents(1000))
	for _, e := range bad[:slices.Min(at)+1] {
		if want = w.WriteEvent(e); want != nil {
			break
		}
	}
	rest = evs[5300:5800]
	for _, e := range rest {
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	return bad, rest, ref, want
}

// TestMaxEventBound checks that maxEventBound bounds eventBound: an event
// with every field at its largest, after one on another device and
// stream, takes all of it.
func TestMaxEventBound(t *testing.T) {
	prev := &Event{Kind: KindAlloc, Device: 1, Stream: 1}
	big := Event{Kind: KindAlloc, TimeNS: math.MinInt64, Addr: math.MaxUint64, SizeBytes: math.MaxUint64,
		Device: -1 << 31, Stream: math.MaxUint32, Aux: math.MaxUint64, Text: 1, Stack: 1, Marker: 1}
	var maxAddr uint64
	if n := eventBound(&big, prev, &maxAddr); n != maxEventBound {
		t.Fatalf("eventBound of the largest event: %d, maxEventBound %d", n, maxEventBound)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		e := Event{Kind: Kind(1 + r.IntN(int(NumKinds)-1)), TimeNS: int64(r.Uint64()), Addr: r.Uint64() >> r.IntN(64),
			SizeBytes: r.Uint64() >> r.IntN(64), Device: DeviceID(r.Int32()), Stream: StreamID(r.Uint32()), Aux: r.Uint64() >> r.IntN(64)}
		if n := eventBound(&e, prev, &maxAddr); n > maxEventBound {
			t.Fatalf("eventBound %d of %+v exceeds maxEventBound %d", n, e, maxEventBound)
		}
		prev = &e
	}
}

// TestRangeBatches checks that a range's chunks encoded a batch at a time
// on the compressors are the bytes WriteEvent writes, whatever event
// ends a batch: what an event encodes depends on the one before (a free
// repeating its block's address and size, a device or stream change, a
// time delta), and the batches are refilled.
func TestRangeBatches(t *testing.T) {
	defer func(rb int) { rangeBatch = rb }(rangeBatch)
	var evs []Event
	for i := range 3000 {
		addr, size := uint64(0x7f0000000000+i%97*4096), uint64(512*(1+i%13))
		st, dev := StreamID(i/7%3), DeviceID(i/11%2)
		ts := int64(1_000_000 + 3*i*1000)
		evs = append(evs,
			Event{Kind: KindAlloc, Device: dev, Stream: st, TimeNS: ts, Addr: addr, SizeBytes: size},
			Event{Kind: KindFreeRequested, Device: dev, Stream: st, TimeNS: ts + 1000, Addr: addr, SizeBytes: size},
			Event{Kind: KindFreeCompleted, Device: dev, Stream: st, TimeNS: ts + 2000, Addr: addr, SizeBytes: size})
	}
	var one bytes.Buffer
	w1, _ := NewWriter(&one, testHeader(), ChunkEvents(1000))
	for _, e := range evs {
		if err := w1.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	for _, rb := range []int{1, 2, 3, 5, 7, 100, 999, 1000, 4096} {
		rangeBatch = rb
		var out bytes.Buffer
		w, _ := NewWriter(&out, testHeader(), ChunkEvents(1000), ChunksByEvents(), Concurrency(3))
		if err := w.WriteRange(len(evs), func(dst []Event, i int) { copy(dst, evs[i:]) }); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), one.Bytes()) {
			t.Fatalf("batches of %d events: %d bytes, WriteEvent %d", rb, out.Len(), one.Len())
		}
	}
}

// TestWriteRangeEnd checks that WriteRangeEnd writes what WriteRange then
// Flush writes, event by event, and that an invalid event, in a whole
// chunk or in the rest it ends the chunk with, gives WriteEvent's error
// and the same file once the writer goes on.
func TestWriteRangeEnd(t *testing.T) {
	_, all, _ := writeRandom(t, 12, 10000) // about 7,600 events: the 5,800 of invalidAt, and ranges of up to 3,000
	var evs []Event
	for _, e := range all {
		if e.Text == NoString && e.Stack == NoStack {
			evs = append(evs, e)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, opts := range [][]WriterOption{
		{ChunkEvents(300), ChunksByEvents(), Concurrency(3)},
		{ChunkEvents(1000), ChunksByEvents(), Concurrency(2)},
		{ChunkEvents(5000), ChunkBytes(4096), Concurrency(4)}, // chunks cut by their bytes: measured
		{ChunkEvents(700)}, // no compressors
	} {
		var one, ranged bytes.Buffer
		w1, _ := NewWriter(&one, testHeader(), opts...)
		wr, _ := NewWriter(&ranged, testHeader(), opts...)
		var calls atomic.Int64
		ends := 0
		for rest := evs; len(rest) > 0; {
			k := min(len(rest), 1+r.IntN(3000))
			for _, e := range rest[:k] {
				if err := w1.WriteEvent(e); err != nil {
					t.Fatal(err)
				}
			}
			fill := func(dst []Event, i int) {
				calls.Add(1)
				copy(dst, rest[i:i+len(dst)])
			}
			if r.IntN(2) == 0 {
				if err := w1.Flush(); err != nil {
					t.Fatal(err)
				}
				if err := wr.WriteRangeEnd(k, fill); err != nil {
					t.Fatal(err)
				}
				ends++
			} else if err := wr.WriteRange(k, fill); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		if err := w1.Close(); err != nil {
			t.Fatal(err)
		}
		if err := wr.Close(); err != nil {
			t.Fatal(err)
		}
		if ends == 0 || calls.Load() == 0 || !bytes.Equal(one.Bytes(), ranged.Bytes()) {
			t.Fatalf("%v: WriteRangeEnd (%d of them) wrote %d bytes, WriteEvent and Flush %d", opts, ends, ranged.Len(), one.Len())
		}
	}
	// The rest goes to the compressors, which fill their chunks a batch
	// (rangeBatch) at a time; the writer itself would fill it up to 1,024
	// events at a time, through WriteEvents, and the file would be the
	// same bytes.
	defer func(rb int) { rangeBatch = rb }(rangeBatch)
	rangeBatch = 99
	var over atomic.Int64 // a batch larger than the compressors'
	w, _ := NewWriter(io.Discard, testHeader(), ChunkEvents(1000), ChunksByEvents(), Concurrency(3))
	if err := w.WriteRangeEnd(5300, func(dst []Event, i int) {
		if len(dst) > rangeBatch {
			over.Store(int64(len(dst)))
		}
		copy(dst, evs[i:])
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := over.Load(); n > 0 {
		t.Fatalf("WriteRangeEnd of 5,300 events in chunks of 1,000: filled %d events at a time, more than the compressors' batch of 99", n)
	}
	rangeBatch = 1 << 10
	// 5,000 events in whole chunks and a rest of 300, which WriteRangeEnd
	// gives the compressors too.
	for _, at := range [][]int{{3333}, {4999}, {0}, {5000}, {5200}, {5299, 4999}, {5299}} {
		bad, rest, ref, want := invalidAt(t, evs, at)
		var out bytes.Buffer
		wr, _ := NewWriter(&out, testHeader(), ChunkEvents(1000), ChunksByEvents(), Concurrency(3))
		got := wr.WriteRangeEnd(len(bad), func(dst []Event, i int) { copy(dst, bad[i:]) })
		if want == nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("invalid at %v: WriteRangeEnd: %v, WriteEvent: %v", at, got, want)
		}
		if err := wr.WriteRangeEnd(len(rest), func(dst []Event, i int) { copy(dst, rest[i:]) }); err != nil {
			t.Fatal(err)
		}
		if err := wr.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), ref.Bytes()) {
			t.Fatalf("invalid at %v: after the error, WriteRangeEnd wrote %d bytes, WriteEvent %d", at, out.Len(), ref.Len())
		}
	}
}
