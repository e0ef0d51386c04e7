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

// outBuf is memory for a decompressed input: an anonymous mapping, out of
// the Go heap, so that the collector neither counts it nor scans it, the
// pages the decoder is done with can be released as it goes (releaser),
// and free gives it back at once.
type outBuf struct {
	b      []byte
	mapped bool
}

// newOutBuf returns n bytes of memory (only the pages touched are
// resident).
func newOutBuf(n int) *outBuf {
	if b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON); err == nil {
		return &outBuf{b: b, mapped: true}
	}
	return &outBuf{b: make([]byte, n)}
}

// grow makes o n bytes long, keeping its content.
func (o *outBuf) grow(n int) {
	g := newOutBuf(n)
	copy(g.b, o.b)
	o.free()
	*o = *g
}

// free releases o's memory; nothing may use it after.
func (o *outBuf) free() {
	if o.mapped && o.b != nil {
		syscall.Munmap(o.b)
	}
	o.b = nil
}
