package analysis

import (
	"os"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/traces"
)

// realTrace returns the embedded multi-agent baseline, or a recorded copy
// of it in the repository, or skips.
func realTrace(t *testing.T) []byte {
	if _, data, err := traces.Baseline(); err == nil {
		return data
	}
	data, err := os.ReadFile("../traces/baseline_s1.fst")
	if err != nil {
		t.Skip("no real multi-agent trace in this checkout")
	}
	return data
}

// TestCompareRealMultiAgent checks the claim on a real H200
// multi-agent inference trace: caching above 10% at peak reserved, and a
// policy or setting below 10%, named by the verdict. The everyday pass
// compares the trace's first 20,000 events (its model loads and the
// agents' first turns, fragmented as the whole run); the long pass
// (FRAGSIM_LONG=1), the whole trace.
func TestCompareRealMultiAgent(t *testing.T) {
	data := realTrace(t)
	if os.Getenv("FRAGSIM_LONG") != "1" {
		data = dataPrefix(t, "baseline_s1.fst", data, 20_000)
	}
	c, err := Compare(opener(data), CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Before != "caching" || c.BeforePct <= 10 {
		t.Errorf("before: %s %.1f%%, want caching above 10%%", c.Before, c.BeforePct)
	}
	if c.AfterPct >= 10 || c.After == "" || c.After == "ideal" {
		t.Errorf("after: %s %.1f%%, want a policy or setting below 10%%", c.After, c.AfterPct)
	}
	lines := c.VerdictLines()
	if !strings.HasPrefix(lines[1], "Fragmentation after: ") || !strings.Contains(lines[1], c.After) {
		t.Errorf("verdict %q does not name %s", lines[1], c.After)
	}
	for _, r := range c.Runs {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Label, r.Error)
		}
	}
}
