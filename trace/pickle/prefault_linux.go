package pickle

import (
	"runtime"
	"syscall"
	"unsafe"
)

// madvPopulateWrite is Linux's MADV_POPULATE_WRITE (5.14 and later).
const madvPopulateWrite = 23

// Prefault asks the kernel to fault in, in the background and in steps from
// the front, the pages of the unused capacity of the tables, so that
// filling them later takes fewer page faults (where touching fresh memory
// is costly, as on virtual machines, they are most of a large decode). It
// changes no byte: the pages stay zero. It does nothing on kernels without
// MADV_POPULATE_WRITE. Their whole 2 MiB pages are asked to be huge
// pages first (HugePages).
func Prefault(tables ...[]byte) {
	HugePages(tables...)
	go prefault(tables)
}

// HugePages asks the kernel to back the whole 2 MiB pages inside tables
// with huge pages (MADV_HUGEPAGE): faulting one in costs about what
// faulting a 4 KiB page does. (Go frees and reuses the memory as usual;
// it splits them if it must.) It is a hint: errors are ignored.
func HugePages(tables ...[]byte) {
	for _, t := range tables {
		if len(t) < hugePage {
			continue
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(t)))
		start := (p + hugePage - 1) &^ (hugePage - 1)
		end := (p + uintptr(len(t))) &^ (hugePage - 1)
		if end > start {
			syscall.Syscall(syscall.SYS_MADVISE, start, end-start, madvHugePage)
		}
	}
}

const (
	madvHugePage = 14 // MADV_HUGEPAGE
	hugePage     = 2 << 20
)

// prefault faults in the whole pages inside tables, a step of each table
// at a time; it reports false when the kernel refused.
func prefault(tables [][]byte) bool {
	defer runtime.KeepAlive(tables)
	const step = 1 << 20
	for off := 0; ; off += step {
		more := false
		for _, t := range tables {
			if off >= len(t) {
				continue
			}
			more = true
			p := uintptr(unsafe.Pointer(&t[off]))
			start := (p + 4095) &^ 4095
			end := (p + uintptr(min(step, len(t)-off))) &^ 4095
			if end > start {
				if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, start, end-start, madvPopulateWrite); e != 0 {
					return false
				}
			}
		}
		if !more {
			return true
		}
	}
}
