package trace

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// Concurrency makes the writer compress up to n chunks at once on other
// goroutines while the caller goes on encoding events; chunks are written
// in order, and the file is byte for byte what a writer without the option
// writes. n <= 1 compresses in the caller (the default). Write errors then
// surface at a later call, Flush at the latest.
func Concurrency(n int) WriterOption {
	return func(o *writerOptions) { o.workers = min(max(n, 1), 64) }
}

// parallel compresses chunks on worker goroutines and writes them, in the
// order submitted, on one writer goroutine.
type parallel struct {
	jobs    chan *chunkJob // to the compressors
	order   chan *chunkJob // to the writer goroutine, in submission order
	free    chan *chunkJob // idle jobs: bounds the chunks in flight
	pending sync.WaitGroup // chunks submitted and not yet written
	workers sync.WaitGroup // compressors and the writer goroutine
	mu      sync.Mutex
	err     error // sticky: the first write or encoder error
	stopped bool
	version int // format version of the chunks
	level   int // the encoders' level (encoderLevels)
	// dropping, on the writer goroutine, is set by a chunk that holds an
	// invalid event: it and the chunks after it are not written (until
	// Writer.writeWhole, with none in flight, clears it).
	dropping bool
}

type chunkJob struct {
	typ byte
	evs []Event // an events chunk's events, encoded into raw by the compressor
	// fill, when set, gives the events (n of them, from index from) on the
	// compressor, which then calls filled.Done (see Writer.WriteRange).
	fill    func(dst []Event, i int)
	from, n int
	filled  *sync.WaitGroup
	// check, when set, has the compressor check the events fill gave: it
	// notes the first invalid one there, and the chunk is not written.
	check *rangeCheck
	bad   bool
	raw   []byte
	comp  []byte
	frame []byte
	ready chan struct{} // closed when frame holds the chunk
}

func newParallel(w io.Writer, n, version, level int) *parallel {
	p := &parallel{
		version: version,
		level:   level,
		jobs:    make(chan *chunkJob, 2*n),
		order:   make(chan *chunkJob, 2*n),
		free:    make(chan *chunkJob, 2*n),
	}
	for range 2 * n {
		j, _ := idleJobs.Get().(*chunkJob)
		if j == nil {
			j = &chunkJob{}
		}
		p.free <- j
	}
	p.workers.Add(n + 1)
	for range n {
		go p.compress()
	}
	go p.write(w)
	return p
}

// idleJobs and idleEventEncoders hold the chunk jobs and event encoders
// of stopped writers, for the next: their buffers (a chunk's encoded
// columns, its frame, about 1 MiB a compressor at 8,192 events) are then
// already faulted in, and need not be cleared.
var (
	idleJobs          sync.Pool // *chunkJob
	idleEventEncoders sync.Pool // *eventEncoder
)

func (p *parallel) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

func (p *parallel) error() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *parallel) compress() {
	defer p.workers.Done()
	var enc *zstd.Encoder
	var ee *eventEncoder
	for j := range p.jobs {
		if enc == nil {
			var err error
			if enc, err = getEncoder(p.level); err != nil {
				p.fail(err)
				enc = nil
				j.frame = j.frame[:0]
				close(j.ready)
				continue
			}
		}
		encoded := j.fill != nil || len(j.evs) > 0
		if encoded && ee == nil {
			if ee, _ = idleEventEncoders.Get().(*eventEncoder); ee == nil {
				ee = &eventEncoder{}
			}
		}
		if j.fill != nil {
			j.raw, j.bad = p.encodeRange(ee, j)
			j.filled.Done()
			j.fill, j.filled, j.check = nil, nil, nil
			if j.bad {
				j.frame = j.frame[:0]
				close(j.ready)
				continue
			}
		} else if len(j.evs) > 0 {
			j.raw = ee.encode(j.raw[:0], j.evs, p.version)
		}
		if encoded && len(j.raw) > maxChunkRaw {
			p.fail(fmt.Errorf("trace: chunk of %d bytes exceeds the %d-byte limit", len(j.raw), maxChunkRaw))
			j.frame = j.frame[:0]
			close(j.ready)
			continue
		}
		j.frame, j.comp = frameChunk(j.frame[:0], j.comp[:0], enc, j.typ, j.raw, p.version)
		close(j.ready)
	}
	if enc != nil {
		encoders[p.level].Put(enc)
	}
	if ee != nil {
		idleEventEncoders.Put(ee)
	}
}

// encodeRange encodes the events of j, a range's chunk, which j.fill
// gives, and checks them (j.check): it returns the chunk's payload, or
// bad when it holds an invalid event. In format version 2 the events are
// given and encoded a batch at a time, so that a chunk's events are
// never all in memory: a whole chunk would be fresh memory to fault in
// on each compressor, every core faulting at once.
func (p *parallel) encodeRange(ee *eventEncoder, j *chunkJob) (raw []byte, bad bool) {
	if p.version < 2 {
		if cap(j.evs) < j.n {
			j.evs = make([]Event, j.n)
		}
		evs := j.evs[:j.n]
		j.fill(evs, j.from)
		if j.check != nil && j.check.scan(evs, j.from) {
			return j.raw[:0], true
		}
		return ee.encode(j.raw[:0], evs, p.version), false
	}
	if cap(ee.batch) != rangeBatch {
		ee.batch = make([]Event, rangeBatch)
	}
	buf := ee.batch[:cap(ee.batch)]
	ee.reserve(j.n)
	ee.begin(p.version, nil)
	for off := 0; off < j.n; off += len(buf) {
		b := buf[:min(len(buf), j.n-off)]
		j.fill(b, j.from+off)
		if j.check != nil && j.check.scan(b, j.from+off) {
			return j.raw[:0], true
		}
		ee.add(b)
	}
	return ee.finish(j.raw[:0], j.n), false
}

// rangeBatch is how many events of a range's chunk encodeRange has in
// memory at a time (a variable for the tests).
var rangeBatch = 1024

func (p *parallel) write(w io.Writer) {
	defer p.workers.Done()
	for j := range p.order {
		<-j.ready
		p.dropping = p.dropping || j.bad
		if !p.dropping && p.error() == nil && len(j.frame) > 0 {
			if _, err := w.Write(j.frame); err != nil {
				p.fail(err)
			}
		}
		p.free <- j
		p.pending.Done()
	}
}

// submit queues the chunk of type typ holding raw (copied: the caller may
// reuse raw at once), waiting while all jobs are in flight.
func (p *parallel) submit(typ byte, raw []byte) error {
	if err := p.error(); err != nil {
		return err
	}
	j := <-p.free
	j.typ, j.evs, j.bad = typ, j.evs[:0], false
	j.raw = append(j.raw[:0], raw...)
	j.ready = make(chan struct{})
	p.pending.Add(1)
	p.order <- j
	p.jobs <- j
	return nil
}

// submitEvents queues an events chunk of the events evs, which the
// compressor encodes; it returns the buffer the caller is to fill next (a
// job's idle one, or evs[:0] emptied when the job has none).
func (p *parallel) submitEvents(evs []Event) ([]Event, error) {
	if err := p.error(); err != nil {
		return evs, err
	}
	j := <-p.free
	next := j.evs[:0]
	if next == nil {
		next = make([]Event, 0, cap(evs))
	}
	j.typ, j.evs, j.bad = chunkEvents, evs, false
	j.ready = make(chan struct{})
	p.pending.Add(1)
	p.order <- j
	p.jobs <- j
	return next, nil
}

// submitRange queues an events chunk of n events that fill gives from
// index from, on the compressor (filled.Done once given, and checked
// when check is not nil).
func (p *parallel) submitRange(fill func([]Event, int), from, n int, filled *sync.WaitGroup, check *rangeCheck) error {
	if err := p.error(); err != nil {
		return err
	}
	j := <-p.free
	j.typ, j.fill, j.from, j.n, j.filled, j.check, j.bad = chunkEvents, fill, from, n, filled, check, false
	filled.Add(1)
	j.ready = make(chan struct{})
	p.pending.Add(1)
	p.order <- j
	p.jobs <- j
	return nil
}

// rangeCheck is the check of a range's events on the compressors
// (Writer.writeWhole): the first invalid event found.
type rangeCheck struct {
	nStr, nStk int          // the strings and stacks defined (Writer.invalid)
	first      atomic.Int64 // the lowest index of an invalid event, + 1 (0: none)
}

// scan reports whether evs, events from to from+len(evs)-1, hold an
// invalid one, noting the first.
func (c *rangeCheck) scan(evs []Event, from int) bool {
	for i := range evs {
		if invalidEvent(&evs[i], c.nStr, c.nStk) {
			g := int64(from+i) + 1
			for {
				f := c.first.Load()
				if (f != 0 && f <= g) || c.first.CompareAndSwap(f, g) {
					return true
				}
			}
		}
	}
	return false
}

// wait returns once every chunk submitted is written, with the first error.
func (p *parallel) wait() error {
	p.pending.Wait()
	return p.error()
}

// stop waits for the chunks submitted and ends the goroutines; p may be nil.
func (p *parallel) stop() error {
	if p == nil {
		return nil
	}
	err := p.wait()
	p.mu.Lock()
	stopped := p.stopped
	p.stopped = true
	p.mu.Unlock()
	if !stopped {
		close(p.jobs)
		close(p.order)
		p.workers.Wait()
		for len(p.free) > 0 {
			j := <-p.free
			j.fill, j.filled, j.check, j.ready = nil, nil, nil, nil
			idleJobs.Put(j)
		}
	}
	return err
}
