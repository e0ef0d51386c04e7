package pytorch

import "syscall"

// mapPopulate asks mmap to fault the whole mapping in at once.
const mapPopulate = syscall.MAP_POPULATE

// releaser returns a function that gives the pages of the mapping data
// before an offset back to the system (MADV_DONTNEED: a private read-only
// file mapping reads them from the file again if they are touched again),
// so that the input does not stay resident while an import decodes it.
func releaser(data []byte) func(off int) {
	done := 0
	return func(off int) {
		end := off &^ (hugePage - 1)
		if end <= done {
			return
		}
		syscall.Madvise(data[done:end], syscall.MADV_DONTNEED)
		done = end
	}
}

const hugePage = 2 << 20
