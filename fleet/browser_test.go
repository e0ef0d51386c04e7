package fleet

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromium returns the path of a Chromium or Chrome binary. Without one
// the browser test skips, except under CI=true, where it fails.
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

// headless runs headless Chromium, with no network, on the page with the
// extra flags, and returns its standard output.
func headless(t *testing.T, bin, dir, page string, flags ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
		"--user-data-dir=" + filepath.Join(dir, "profile"), "--proxy-server=127.0.0.1:9", "--window-size=1280,2400"},
		flags...)
	cmd := exec.CommandContext(ctx, bin, append(args, "file://"+page)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "Uncaught") {
		t.Errorf("script error:\n%s", stderr.String())
	}
	return out
}

// TestFleetPageInBrowser opens fleet.html of a small fleet, hostile names
// included, in headless Chromium with no network: the DOM it builds holds
// the tables, one bar per candidate and no element made from a name; a
// screenshot of it is drawn (FLEET_SCREENSHOT=FILE keeps it to look at).
func TestFleetPageInBrowser(t *testing.T) {
	bin := chromium(t)
	f, rows := testFleet(t)
	dir := t.TempDir()
	page := filepath.Join(dir, HTMLFile)
	if err := os.WriteFile(page, []byte(render(t, f, rows)), 0o644); err != nil {
		t.Fatal(err)
	}

	// One launch both dumps the DOM and draws the screenshot: Chromium's
	// start is most of the test.
	shot := filepath.Join(dir, "fleet.png")
	dom := string(headless(t, bin, dir, page, "--dump-dom", "--screenshot="+shot))
	for _, id := range []string{"effect-chart", "candidates", "jobs", "stacks", "ooms", "traces", "rec-line", "with-regressions", "failures"} {
		if !strings.Contains(dom, `id="`+id+`"`) {
			t.Errorf("no #%s in the DOM", id)
		}
	}
	if n := len(regexp.MustCompile(`<rect class="saving (ok|reg|neg)"`).FindAllString(dom, -1)); n != len(f.Candidates) {
		t.Errorf("the chart has %d bars, want one per candidate (%d)", n, len(f.Candidates))
	}
	if n := strings.Count(dom, "<tr id=\"trace-"); n != len(rows) {
		t.Errorf("%d trace rows in the DOM, want %d", n, len(rows))
	}
	for _, bad := range liveMarkup(dom) {
		t.Errorf("the DOM holds %s", bad)
	}
	if !strings.Contains(dom, ">1.75x<") {
		t.Errorf("the imbalance 1.75x is not in the DOM")
	}

	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if inked(img) < 0.02 {
		t.Errorf("the screenshot is nearly blank (%.1f%% of pixels drawn)", 100*inked(img))
	}
	if keep := os.Getenv("FLEET_SCREENSHOT"); keep != "" {
		if err := os.WriteFile(keep, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// inked is the share of the image's pixels that are not the page's
// background colours (white, light grey).
func inked(img image.Image) float64 {
	r := img.Bounds()
	n, ink := 0, 0
	for y := r.Min.Y; y < r.Max.Y; y += 2 {
		for x := r.Min.X; x < r.Max.X; x += 2 {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			n++
			if cr>>8 < 230 || cg>>8 < 230 || cb>>8 < 230 {
				ink++
			}
		}
	}
	return float64(ink) / float64(max(n, 1))
}
