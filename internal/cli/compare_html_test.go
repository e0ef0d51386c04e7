package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompareHTMLWritesTheReport(t *testing.T) {
	tr := synthAgents(t, 5000, 1)
	out := filepath.Join(t.TempDir(), "r.html")
	// Two candidates: the page holds what the table recommends, whichever
	// candidates were weighed.
	stdout, stderr, code := runCLI("compare", tr, "--policies", "caching,expandable", "--setting", "none", "--html", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// The page recommends what the table does.
	found := false
	for _, l := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(l, "Recommended: ") {
			found = true
			want := strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(l, "&", "\\u0026"), "<", "\\u003c"), ">", "\\u003e")
			if !strings.Contains(string(page), want) {
				t.Errorf("the page lacks the table's line %q", l)
			}
		}
	}
	if !found {
		t.Errorf("the table has no Recommended line:\n%s", stdout)
	}
	if !strings.Contains(string(page), `"layouts":[{`) {
		t.Error("the page has no segment map")
	}
}
