package traces

import (
	"bytes"
	"os"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

func TestBaselineIsTheCommittedTrace(t *testing.T) {
	name, data, err := Baseline()
	if err != nil {
		t.Fatal(err)
	}
	disk, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, disk) {
		t.Fatalf("embedded %s differs from the file", name)
	}
	h, events, err := trace.ReadAll(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if h.GPUName != "NVIDIA H200" || h.GPUTotalBytes != 150109880320 || h.TorchVersion == "" {
		t.Errorf("header lacks the recording's GPU and versions: %+v", h)
	}
	if h.Tags["wall_native_s"] == "" || h.Tags["wall_expandable_s"] == "" {
		t.Errorf("header lacks the wall times: %v", h.Tags)
	}
	allocs := 0
	for _, e := range events {
		if e.Kind == trace.KindAlloc {
			allocs++
		}
	}
	if allocs != 41942 { // the snapshot's own count of alloc entries
		t.Errorf("%d allocs, the snapshot has 41942", allocs)
	}
}
