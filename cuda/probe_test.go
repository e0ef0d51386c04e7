//go:build cgo

package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestProbe runs the probe against a missing driver, a driver without a
// GPU and the fake driver of the hook tests, which refuses single
// allocations above FAKE_CUDA_LIMIT.
func TestProbe(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: the probe test builds a fake libcuda")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "libcuda.so.1")
	if out, err := exec.Command("gcc", "-O2", "-shared", "-fPIC", "-o", fake, "hook/testdata/fakecuda.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}

	t.Setenv("FRAGSIM_LIBCUDA", filepath.Join(dir, "missing", "libcuda.so.1"))
	if _, err := Probe(0); err == nil || !strings.Contains(err.Error(), "cannot load the CUDA driver library") {
		t.Errorf("missing driver: err %v", err)
	}

	t.Setenv("FRAGSIM_LIBCUDA", fake)
	t.Setenv("FAKE_CUDA_NO_DEVICE", "1")
	if _, err := Probe(0); err == nil || !strings.Contains(err.Error(), "no CUDA-capable device") {
		t.Errorf("no GPU: err %v", err)
	}
	os.Unsetenv("FAKE_CUDA_NO_DEVICE")

	const limit = 5<<30 + 12345 // the fake refuses any block above this
	t.Setenv("FAKE_CUDA_LIMIT", strconv.Itoa(limit))
	r, err := Probe(0)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(limit) / ProbeGranularity * ProbeGranularity; r.LargestBlockBytes != want {
		t.Errorf("largest block %d, want %d", r.LargestBlockBytes, want)
	}
	if r.TotalBytes != 80<<30 || r.FreeBytes != 80<<30 || r.GPUName != "Fake GPU" || r.CUDAVersion != "12.4" {
		t.Errorf("result %+v", r)
	}
	if r.Attempts < 2 || r.Attempts > 20 {
		t.Errorf("%d allocations for a bisection over 80 GiB in 2 MiB steps", r.Attempts)
	}
	if _, err := Probe(3); err == nil || !strings.Contains(err.Error(), "device 3") {
		t.Errorf("bad device: err %v", err)
	}
}
