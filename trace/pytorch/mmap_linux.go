package pytorch

import "syscall"

// mapPopulate asks mmap to fault the whole mapping in at once.
const mapPopulate = syscall.MAP_POPULATE

// releaser returns a function that gives the pages of the mapping data
// before an offset back to the system (MADV_DONTNEED: a private read-only
// file mapping reads them from the file again if they are touched again),
// so that the input does not stay resident while an import decodes it,
// and faults in the next window of a mapping larger than maxPopulateBytes
// (MADV_POPULATE_READ), which mapFile did not fault in whole.
func releaser(data []byte) func(off int) {
	done, ahead := 0, 0
	populate := func(off int) {
		if len(data) <= maxPopulateBytes {
			return
		}
		end := min(len(data), off+populateWindow) &^ (pageSize - 1)
		if end > ahead {
			syscall.Madvise(data[ahead:end], madvPopulateRead) // a hint: errors are harmless
			ahead = end
		}
	}
	populate(0)
	return func(off int) {
		populate(off)
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
