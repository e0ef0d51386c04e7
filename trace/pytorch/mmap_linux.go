package pytorch

import (
	"errors"
	"sync/atomic"
	"syscall"
)

// populate faults in the mapping data, when it is no larger than
// maxPopulateBytes, on another goroutine, a step at a time from its
// start, ahead of the decoder, and returns what stops it and waits for it
// (before the mapping is unmapped). A larger mapping is faulted in a
// window at a time by releaser.
// (mmap's MAP_POPULATE would do it on the decoding goroutine, before
// the decode begins.)
func populate(data []byte) (done func()) {
	if len(data) > maxPopulateBytes {
		return func() {}
	}
	var stop atomic.Bool
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		populateAll(data, &stop)
	}()
	return func() {
		stop.Store(true)
		<-finished
	}
}

// populateAll faults in data a step at a time, until stop is set.
func populateAll(data []byte, stop *atomic.Bool) {
	for off := 0; off < len(data) && !stop.Load(); off += populateStep {
		b := data[off:min(off+populateStep, len(data))]
		if err := syscall.Madvise(b, madvPopulateRead); errors.Is(err, syscall.EINVAL) || populateByReading {
			// A kernel before 5.14: each page read once.
			var sum byte
			for i := 0; i < len(b); i += pageSize {
				sum += b[i]
			}
			sink.Add(uint32(sum))
		}
	}
}

// populateByReading has populateAll read the pages as on a kernel without
// MADV_POPULATE_READ (tests).
var populateByReading bool

// sink keeps populate's reads of the pages from being optimized away.
var sink atomic.Uint32

// populateStep is how much populate faults in at a time.
const populateStep = 1 << 20

// releaser returns a function that gives the pages of the mapping data
// before an offset back to the system (MADV_DONTNEED: a private read-only
// file mapping reads them from the file again if they are touched again),
// so that the input does not stay resident while an import decodes it,
// and faults in the next window of a mapping larger than maxPopulateBytes
// (MADV_POPULATE_READ), which mapFile did not fault in whole.
func releaser(data []byte) func(off int) {
	done, ahead := 0, 0
	faultAhead := func(off int) {
		if len(data) <= maxPopulateBytes {
			return
		}
		end := min(len(data), off+populateWindow) &^ (pageSize - 1)
		if end > ahead {
			syscall.Madvise(data[ahead:end], madvPopulateRead) // a hint: errors are harmless
			ahead = end
		}
	}
	faultAhead(0)
	return func(off int) {
		faultAhead(off)
		end := off &^ (hugePage - 1)
		if end <= done {
			return
		}
		syscall.Madvise(data[done:end], syscall.MADV_DONTNEED)
		done = end
	}
}

const (
	hugePage         = 2 << 20
	pageSize         = 4 << 10
	populateWindow   = 48 << 20
	madvPopulateRead = 22 // MADV_POPULATE_READ (Linux 5.14 and later)
)
