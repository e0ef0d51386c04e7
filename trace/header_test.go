package trace

import (
	"reflect"
	"testing"
	"time"
)

func TestHeaderMerge(t *testing.T) {
	h := Header{Producer: ProducerPyTorch, GPUName: "old", TorchVersion: "2.10", Tags: map[string]string{"a": "1", "b": "2"}}
	when := time.Date(2026, 11, 30, 11, 45, 0, 0, time.UTC)
	h.Merge(&Header{GPUName: "NVIDIA H200", GPUTotalBytes: 150109880320, Created: when, Tags: map[string]string{"b": "3", "c": "4"}})
	want := Header{Producer: ProducerPyTorch, GPUName: "NVIDIA H200", GPUTotalBytes: 150109880320, TorchVersion: "2.10",
		Created: when, Tags: map[string]string{"a": "1", "b": "3", "c": "4"}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("merged %+v\nwant   %+v", h, want)
	}
	var empty Header
	empty.Merge(&Header{Tags: map[string]string{"k": "v"}})
	if empty.Tags["k"] != "v" {
		t.Errorf("tags not created: %+v", empty)
	}
	empty.Merge(nil)
}
