//go:build linux || darwin || freebsd

package pytorch

import (
	"os"
	"syscall"
)

// minMapBytes is the smallest file mapFile maps; smaller ones are read.
const minMapBytes = 1 << 20

// maxPopulateBytes is the largest file mapFile faults in whole, on another
// goroutine (see populate).
const maxPopulateBytes = 64 << 20

// mapFile maps the regular file f read-only into memory, with its pages
// faulted in ahead of the decode where the system can (populate), so that
// a large snapshot is neither copied nor faulted in page by page. It
// returns ok false when the file cannot be mapped (too small, not
// regular, or mmap failed): the caller then reads it. unmap releases the
// mapping; nothing may use data after it.
func mapFile(f *os.File) (data []byte, unmap func(), ok bool) {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() < minMapBytes || st.Size() != int64(int(st.Size())) {
		return nil, nil, false
	}
	data, err = syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil, false
	}
	done := populate(data)
	return data, func() { done(); syscall.Munmap(data) }, true
}
