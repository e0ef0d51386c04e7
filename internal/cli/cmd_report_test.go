package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReportWritesPage(t *testing.T) {
	trace := synthAgents(t, 5000, 1)
	out := filepath.Join(t.TempDir(), "r.html")
	// Two candidates: the page is written the same whichever were weighed.
	_, stderr, code := runCLI("report", trace, "-o", out, "--moments", "4", "--policies", "caching,expandable", "--setting", "none")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<script type=\"application/json\" id=\"data\">", "\"recommendation\":", "\"layouts\":", "NVIDIA H200"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if !strings.Contains(stderr, "wrote "+out) {
		t.Errorf("stderr does not say the file was written: %q", stderr)
	}
}

func TestReportUsageAndBadTrace(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := runCLI("report", synthTrace(t, 1000)); code != 2 {
		t.Errorf("report without -o: exit %d, want 2 (%s)", code, stderr)
	}
	tr := synthTrace(t, 1000)
	for _, args := range [][]string{{"--policy", "nosuch"}, {"--goal", "nosuch"}, {"--moments", "0"}, {"--setting", "max_split_size_mb:x"}} {
		if _, stderr, code := runCLI(append([]string{"report", tr, "-o", filepath.Join(dir, "x.html")}, args...)...); code != 2 {
			t.Errorf("report %v: exit %d, want 2 (%s)", args, code, stderr)
		}
	}
	bad := filepath.Join(dir, "bad.fst")
	if err := os.WriteFile(bad, []byte("not a trace"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "r.html")
	_, stderr, code := runCLI("report", bad, "-o", out)
	if code != 1 || !strings.Contains(stderr, "bad.fst") {
		t.Errorf("bad trace: exit %d, stderr %q; want 1 and the file named", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a page was written for a bad trace")
	}
}
