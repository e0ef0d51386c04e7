package cli

import (
	"encoding/json"
	"slices"
	"testing"
)

// A repeatable flag's value keeps its commas: one --setting of two knobs
// is one candidate (PYTORCH_CUDA_ALLOC_CONF joins its knobs with commas),
// not two candidates of one knob each.
func TestSettingKeepsItsCommas(t *testing.T) {
	const both = "garbage_collection_threshold:0.8,max_split_size_mb:128"
	out, errOut, code := runCLI("compare", "../../traces/conformance/gc_medium.fst", "--policies", "caching",
		"--setting", both, "--setting", "roundup_power2_divisions:4", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct{ Order []string }
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := []string{"caching", "caching+" + both, "caching+roundup_power2_divisions:4"}
	if !slices.Equal(got.Order, want) {
		t.Errorf("candidates %q, want %q", got.Order, want)
	}
}
