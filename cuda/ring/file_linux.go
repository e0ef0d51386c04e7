package ring

import (
	"fmt"
	"os"
	"syscall"
)

// initialChunks are the chunks a new region file has room for; the
// recording process grows it as it needs more.
const initialChunks = 64

// Create makes a region file of up to maxChunks chunks in dir, maps it and
// returns it with the file's path (the recording process maps the same
// file: pass the path in FRAGSIM_SHM). The caller removes the file.
func Create(dir string, maxChunks int) (*Region, string, error) {
	f, err := os.CreateTemp(dir, "fragsim-ring-*")
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	fail := func(err error) (*Region, string, error) {
		os.Remove(f.Name())
		return nil, "", fmt.Errorf("record region %s: %w", f.Name(), err)
	}
	backed := min(initialChunks, maxChunks)
	size := int64(Size(backed))
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		if err := f.Truncate(size); err != nil {
			return fail(err)
		}
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, Size(maxChunks), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fail(err)
	}
	r, err := Init(mem, maxChunks, backed)
	if err != nil {
		syscall.Munmap(mem)
		return fail(err)
	}
	r.unmap = func() error { return syscall.Munmap(mem) }
	return r, f.Name(), nil
}

// Map maps the region file at path that a recording process made (in a
// region directory, see RegionSuffix), for the reader. Close unmaps it.
func Map(path string) (*Region, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hdr [HdrBytes]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return nil, fmt.Errorf("record region %s: %w", path, err)
	}
	probe := &Region{mem: hdr[:]}
	mc := probe.u64(offMaxChunks)
	if probe.u64(offMagic) != Magic || probe.u32(offVersion) != Version || mc == 0 || mc > DefaultMaxChunks*16 {
		return nil, fmt.Errorf("record region %s: not a fragsim record region of this version", path)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, Size(int(mc)), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("record region %s: %w", path, err)
	}
	r, err := View(mem)
	if err != nil {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("record region %s: %w", path, err)
	}
	r.unmap = func() error { return syscall.Munmap(mem) }
	return r, nil
}
