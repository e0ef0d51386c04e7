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
	stdout, stderr, code := runCLI("compare", tr, "--html", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// The page recommends what the table does.
	for _, l := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(l, "Recommended: ") {
			want := strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(l, "&", "\\u0026"), "<", "\\u003c"), ">", "\\u003e")
			if !strings.Contains(string(page), want) {
				t.Errorf("the page lacks the table's line %q", l)
			}
		}
	}
	if !strings.Contains(string(page), `"layouts":[{`) {
		t.Error("the page has no segment map")
	}
}
