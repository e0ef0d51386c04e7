package lint

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestFiguresMatchResults checks that every row of the README's figures
// table names a command that bench/RESULTS.md gives too, and figures
// (numbers with a unit, a sign or an x) that RESULTS.md holds.
func TestFiguresMatchResults(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	results, err := os.ReadFile("../../bench/RESULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Figures\n")
	if !ok {
		t.Fatal("README.md has no Figures section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	figure := regexp.MustCompile(`[+-]?\d+(\.\d+)?(x|%| s| MiB| M)`)
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || strings.TrimSpace(cells[0]) == "what" {
			continue
		}
		rows++
		what, value, cmd := strings.TrimSpace(cells[0]), cells[1], strings.TrimSpace(cells[3])
		if !strings.Contains(string(results), cmd) {
			t.Errorf("README figure %q: command %s is not in bench/RESULTS.md", what, cmd)
		}
		for _, f := range figure.FindAllString(value, -1) {
			if !strings.Contains(string(results), f) {
				t.Errorf("README figure %q: %q is not in bench/RESULTS.md", what, f)
			}
		}
	}
	if rows < 10 {
		t.Fatalf("read %d rows of the README's figures table", rows)
	}
}
