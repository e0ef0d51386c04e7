package pytorch

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"
)

// TestPopulate checks that populateAll faults a mapped input in (with
// MADV_POPULATE_READ, and by reading its pages as on an older kernel):
// the mapping's resident size goes from nothing to its size. And that
// mapFile's unmap, which waits for its populate, unmaps.
func TestPopulate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.pickle")
	data := make([]byte, 3<<20+123)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := (len(data) + pageSize - 1) / pageSize * pageSize >> 10
	for _, reading := range []bool{false, true} {
		m, err := syscall.Mmap(int(f.Fd()), 0, len(data), syscall.PROT_READ, syscall.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		start := uintptr(unsafe.Pointer(&m[0]))
		if rss := mappingRSS(t, start); rss != 0 {
			t.Errorf("reading %v: %d KiB resident before populateAll", reading, rss)
		}
		populateByReading = reading
		populateAll(m, &atomic.Bool{})
		populateByReading = false
		if rss := mappingRSS(t, start); rss != want {
			t.Errorf("reading %v: %d KiB of the %d KiB mapping resident", reading, rss, want)
		}
		syscall.Munmap(m)
	}
	m, unmap, ok := mapFile(f)
	if !ok {
		t.Fatal("not mapped")
	}
	start := uintptr(unsafe.Pointer(&m[0]))
	unmap()
	if rss := mappingRSS(t, start); rss >= 0 {
		t.Errorf("the mapping is still there after unmap (%d KiB resident)", rss)
	}
}

// mappingRSS returns the resident KiB of the mapping that starts at
// start (/proc/self/smaps), or -1 when there is none.
func mappingRSS(t *testing.T, start uintptr) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	prefix := fmt.Sprintf("%x-", start)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix) {
			in = true
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			var kb int
			fmt.Sscanf(strings.TrimPrefix(line, "Rss:"), "%d", &kb)
			return kb
		}
	}
	return -1
}
