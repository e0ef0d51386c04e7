package ring

import (
	"time"

	"github.com/fragsim/fragsim/trace"
)

const (
	// GapTimeout is how long a missing sequence number holds later records
	// back before it is skipped (a thread between taking its number and
	// publishing its record).
	GapTimeout = 2 * time.Second
	drainBatch = 4096
	// maxDrainTime bounds one Drain call without all, so that threads that
	// record faster than the trace is written cannot keep the caller from
	// flushing.
	maxDrainTime = 100 * time.Millisecond
)

// Drainer moves a region's records into a trace, in sequence order.
type Drainer struct {
	r         *Region
	w         *trace.Writer
	seq       sequencer
	texts     map[uint64]string
	buf       []rec
	lastTime  int64
	unflushed bool
	lastFlush time.Time
	err       error
	// Events counts the trace events written.
	Events uint64
}

// NewDrainer returns a drainer from r into w, whose first record has
// sequence number 0.
func NewDrainer(r *Region, w *trace.Writer) *Drainer {
	return &Drainer{r: r, w: w, texts: map[uint64]string{}, lastFlush: time.Now(),
		seq: sequencer{gapTimeout: GapTimeout}}
}

// Err returns the first error the drainer met (then it writes nothing more).
func (d *Drainer) Err() error { return d.err }

// Missing returns the calls that are not in the trace: those the recording
// process found no room for, and Skipped.
func (d *Drainer) Missing() uint64 { return d.r.Lost() + d.seq.skipped }

// Skipped returns the sequence numbers never published: a thread stopped
// between taking its number and publishing its call, or the process died
// there.
func (d *Drainer) Skipped() uint64 { return d.seq.skipped }

// Drain writes the records published so far. Unless all is set it stops
// after about maxDrainTime and holds back records behind a sequence gap;
// with all set (the recording process is gone or closed) it writes every
// record, skipping gaps.
func (d *Drainer) Drain(now time.Time, all bool) error {
	for d.err == nil {
		var err error
		d.buf, err = d.r.drain(d.buf[:0], drainBatch, d.texts)
		if err != nil {
			d.err = err
			break
		}
		d.seq.add(d.buf...)
		d.seq.backlog = len(d.buf) == drainBatch
		for _, x := range d.seq.release(now, false) {
			d.write(x)
		}
		if len(d.buf) < drainBatch || !all && time.Since(now) > maxDrainTime {
			break
		}
	}
	if all {
		for _, x := range d.seq.release(now, true) {
			d.write(x)
		}
	}
	return d.err
}

// Flush ends the trace's current chunk when events were written since the
// last flush and every is past.
func (d *Drainer) Flush(now time.Time, every time.Duration) error {
	if d.err != nil || !d.unflushed || now.Sub(d.lastFlush) < every {
		return d.err
	}
	if err := d.w.Flush(); err != nil {
		d.err = err
	}
	d.unflushed = false
	d.lastFlush = now
	return d.err
}

// write turns one recorded call into trace events.
func (d *Drainer) write(x rec) {
	if d.err != nil {
		return
	}
	t := x.timeNS
	if t < d.lastTime {
		t = d.lastTime // the clock read and the sequence number are not taken atomically
	}
	d.lastTime = t
	e := trace.Event{Device: trace.DeviceID(x.device), Stream: trace.StreamID(x.stream), TimeNS: t, Addr: x.addr, SizeBytes: x.size}
	var err error
	switch x.kind {
	case KindAlloc:
		e.Kind = trace.KindAlloc
		err = d.w.WriteEvent(e)
	case KindFree:
		// The pool frees in stream order at once: the request completes immediately.
		e.Kind = trace.KindFreeRequested
		if err = d.w.WriteEvent(e); err == nil {
			e.Kind = trace.KindFreeCompleted
			err = d.w.WriteEvent(e)
			d.Events++
		}
	case KindFreeRequested:
		// Deferred by record_stream: the block waits for its streams.
		e.Kind = trace.KindFreeRequested
		err = d.w.WriteEvent(e)
	case KindFreeCompleted:
		e.Kind = trace.KindFreeCompleted
		err = d.w.WriteEvent(e)
	case KindOOM:
		e.Kind, e.Aux = trace.KindOOM, x.aux
		err = d.w.WriteEvent(e)
	case KindEmptyCache:
		e.Kind = trace.KindEmptyCache
		err = d.w.WriteEvent(e)
	case KindFraction:
		e.Kind, e.Aux = trace.KindSetFraction, x.aux
		err = d.w.WriteEvent(e)
	case KindDeviceMem:
		// Addr keeps the pool's reserved bytes: outside = total - free - reserved.
		e.Kind, e.Aux = trace.KindDeviceMem, x.aux
		err = d.w.WriteEvent(e)
	case KindPoolBegin, KindPoolEnd, KindPoolRelease:
		// In the order of trace's pool kinds.
		e.Kind = trace.KindPoolBegin + trace.Kind(x.kind-KindPoolBegin)
		e.Aux = x.aux
		err = d.w.WriteEvent(e)
	case KindMarker:
		e.Kind, e.Marker, e.Aux, e.SizeBytes = trace.KindMarker, trace.MarkerKind(x.marker), uint64(x.marker), 0
		e.Text = d.w.String(d.texts[x.seq])
		delete(d.texts, x.seq)
		err = d.w.WriteEvent(e)
	default:
		return
	}
	d.Events++
	d.unflushed = true
	if err != nil {
		d.err = err
	}
}
