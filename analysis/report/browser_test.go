package report

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromium returns the path of a Chromium or Chrome binary. Without one
// the browser tests skip, except under CI=true, where they fail.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH: CI installs it (apt-get install -y chromium)")
	}
	t.Skip("no chromium on PATH")
	return ""
}

// selftestResult is what the page's #selftest hash writes into the DOM.
type selftestResult struct {
	Errors   []string `json:"errors"`
	Canvases []struct {
		ID  string `json:"id"`
		Ink int    `json:"ink"`
	} `json:"canvases"`
	Recommendation string `json:"recommendation"`
	Layouts        int    `json:"layouts"`
	SelectedFrom   int    `json:"selectedFrom"`
	SelectedTo     int    `json:"selectedTo"`
	MapChanged     bool   `json:"mapChanged"`
	Tooltip        string `json:"tooltip"`
	EmptyDrawn     int    `json:"emptyDrawn"`
}

// openInBrowser writes a report's page (doc) and opens it in headless
// Chromium with no network, within limit, and returns what the page's
// self-test saw, with the DOM.
func openInBrowser(t *testing.T, doc []byte, limit time.Duration) (selftestResult, []byte) {
	t.Helper()
	bin := chromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	if err := os.WriteFile(page, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--proxy-server=127.0.0.1:9", "--window-size=1280,2000",
		"--virtual-time-budget=10000", "--dump-dom", "file://"+page+"#selftest")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	m := regexp.MustCompile(`(?s)<pre id="selftest"[^>]*>(.*?)</pre>`).FindSubmatch(out)
	if m == nil || len(bytes.TrimSpace(m[1])) == 0 {
		t.Fatalf("the page's self-test did not run; DOM:\n%.2000s", out)
	}
	var res selftestResult
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &res); err != nil {
		t.Fatalf("self-test result %q: %v", m[1], err)
	}
	return res, out
}

// TestReportInBrowser opens the report of a committed trace in headless
// Chromium, with no network, and reads back what the page's self-test saw:
// no script error, every canvas drawn, the recommendation shown, and the
// segment map redrawn when another moment is selected. It runs in
// parallel: most of its time is spent waiting on Chromium.
func TestReportInBrowser(t *testing.T) {
	t.Parallel()
	rep := baseline(t)
	res, out := openInBrowser(t, baselinePage(t), 90*time.Second)
	if len(res.Errors) > 0 {
		t.Errorf("script errors: %q", res.Errors)
	}
	if len(res.Canvases) < 3 {
		t.Errorf("%d canvases, want the timeline, the segment map and the histogram", len(res.Canvases))
	}
	for _, c := range res.Canvases {
		if c.Ink == 0 {
			t.Errorf("canvas %q is empty", c.ID)
		}
	}
	if res.Recommendation == "" || res.Recommendation != rep.Recommendation.Line {
		t.Errorf("recommendation shown %q, want %q", res.Recommendation, rep.Recommendation.Line)
	}
	if !strings.Contains(string(out), html.EscapeString(rep.Recommendation.Saving)) {
		t.Errorf("the saving %q is not on the page", rep.Recommendation.Saving)
	}
	if !regexp.MustCompile(`^(active|free, stranded|free, releasable): \d`).MatchString(res.Tooltip) || !strings.Contains(res.Tooltip, "segment ") {
		t.Errorf("hovering a block shows %q, want its state, size and segment", res.Tooltip)
	}
	if res.Layouts != len(rep.Layouts) || res.SelectedFrom == res.SelectedTo || !res.MapChanged {
		t.Errorf("selecting another moment (%d -> %d of %d) did not change the segment map", res.SelectedFrom, res.SelectedTo, res.Layouts)
	}
}

// TestReportHostileInBrowser opens the report of a trace whose agent,
// model and frame names are 200,000 characters long (such a name once
// stalled Chromium past 120 s) and whose moments after an empty_cache()
// hold no segment (once written as "segments": null, on which the page
// threw): the page draws in time, without a script error, every moment
// included. It runs in parallel, as TestReportInBrowser does.
func TestReportHostileInBrowser(t *testing.T) {
	t.Parallel()
	rep := hostileReport(t)
	empty := 0
	for _, l := range rep.Layouts {
		if len(l.Segments) == 0 {
			empty++
		}
	}
	if empty == 0 {
		t.Fatalf("no moment without segments among %d", len(rep.Layouts))
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	res, out := openInBrowser(t, page.Bytes(), 60*time.Second)
	if len(res.Errors) > 0 {
		t.Errorf("script errors: %q", res.Errors)
	}
	if res.EmptyDrawn != empty {
		t.Errorf("%d of the %d moments without segments drawn", res.EmptyDrawn, empty)
	}
	if bytes.Contains(out, bytes.Repeat([]byte("A"), maxLabelBytes+1)) || !bytes.Contains(out, []byte("AAAA…")) {
		t.Errorf("the agent's name is not cut on the page")
	}
}
