package replay

import (
	"fmt"
	"io"
	"sync"

	"github.com/fragsim/fragsim/trace"
)

// batchLen is the number of events decoded at a time.
const batchLen = 2048

// serialLen is the number of events runSerial decodes at a time (16 KiB
// of events).
const serialLen = 256

// batches holds idle batches (*batch), so that a run does not allocate
// (and page in) fresh event buffers.
var batches = sync.Pool{New: func() any { return &batch{evs: make([]trace.Event, batchLen)} }}

// runSerial decodes and replays on the calling goroutine.
func (e *engine) runSerial(r *trace.Reader) error {
	b := batches.Get().(*batch)
	defer batches.Put(b)
	// A short run at a time, so that the decoded events are still in the
	// first-level cache when they are replayed.
	buf := b.evs[:serialLen]
	for {
		n, err := r.ReadEvents(buf)
		if err := e.replay(buf[:n]); err != nil {
			return err
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("replay: after event %d: %w", e.index, err)
		}
	}
}

// batch is a run of decoded events and the error that ended the decoding.
type batch struct {
	evs []trace.Event
	n   int
	err error
}

// pipelineBatches is the number of batches in flight between the decoder
// and the engine.
const pipelineBatches = 4

// runPipelined decodes on a second goroutine, a few batches ahead of the
// replay, recycling a small ring of batches: decoding overlaps replay on
// another core. The decoder is stopped and waited for before it returns,
// so r is no longer used once Run returns. Run does not use it when an
// Observer is set, since an Observer may read r's string and stack tables,
// which decoding extends.
func (e *engine) runPipelined(r *trace.Reader) error {
	full := make(chan *batch, pipelineBatches)
	free := make(chan *batch, pipelineBatches)
	for i := 0; i < pipelineBatches; i++ {
		free <- batches.Get().(*batch)
	}
	done := make(chan struct{})
	go func() {
		defer close(full)
		for {
			var b *batch
			select {
			case b = <-free:
			case <-done:
				return
			}
			b.n, b.err = r.ReadEvents(b.evs)
			full <- b // never blocks: at most pipelineBatches exist
			if b.err != nil {
				return
			}
		}
	}()
	defer func() {
		close(done)
		for b := range full {
			batches.Put(b)
		}
		for len(free) > 0 {
			batches.Put(<-free)
		}
	}()
	for b := range full {
		if err := e.replay(b.evs[:b.n]); err != nil {
			return err
		}
		if err := b.err; err != nil {
			free <- b
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("replay: after event %d: %w", e.index, err)
		}
		free <- b
	}
	return nil
}
