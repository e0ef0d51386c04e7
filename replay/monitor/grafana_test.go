package monitor

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestGrafanaDashboard checks docs/grafana.json against the metrics: every
// query names only metrics the monitor exports, every panel's query at
// least one, every metric is plotted, and the alert rule fires on the
// silent-OOM risk.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../../docs/grafana.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docs/grafana.json: %v", err)
	}
	exported := map[string]bool{}
	for _, n := range Names() {
		exported[n] = true
	}
	ident := regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// names returns the fragsim metrics a query names, failing on the
	// others.
	names := func(where, q string) []string {
		var out []string
		for _, id := range ident.FindAllString(q, -1) {
			if strings.HasPrefix(id, "fragsim_") {
				if !exported[id] {
					t.Errorf("%s: %q names %s, which the monitor does not export", where, q, id)
				}
				out = append(out, id)
			}
		}
		return out
	}
	plotted := map[string]bool{}
	panels, _ := doc["panels"].([]any)
	if len(panels) == 0 {
		t.Fatal("docs/grafana.json has no panels")
	}
	for _, p := range panels {
		p := p.(map[string]any)
		targets, _ := p["targets"].([]any)
		if len(targets) == 0 {
			t.Errorf("panel %q has no query", p["title"])
		}
		for _, tg := range targets {
			q, _ := tg.(map[string]any)["expr"].(string)
			ns := names("panel "+p["title"].(string), q)
			if len(ns) == 0 {
				t.Errorf("panel %q: query %q names no fragsim metric", p["title"], q)
			}
			for _, n := range ns {
				plotted[n] = true
			}
		}
	}
	for n := range exported {
		if !plotted[n] {
			t.Errorf("%s is exported but no panel plots it", n)
		}
	}
	// Every other query anywhere in the file (variables, annotations, the
	// alert rule) names exported metrics only.
	var rules []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					names(path+"."+k, s)
					if strings.Contains(path, "fragsim_alerting") {
						rules = append(rules, s)
					}
				}
				walk(path+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path, x)
			}
		}
	}
	walk("", doc)
	if len(rules) != 1 || !strings.Contains(rules[0], "fragsim_silent_oom_risk") {
		t.Errorf("the alert rule's queries %q: want one, on fragsim_silent_oom_risk", rules)
	}
}
