// Package lint holds tests that check the project's layering rules.
package lint

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/fragsim/fragsim"

// rank orders the top-level packages the way data flows: a package may import
// project packages of its own rank or lower, never higher. trace stands alone;
// cuda records into traces; allocator implements replay's Policy; analysis
// drives both; the command line sits on top. traces holds data only.
var rank = map[string]int{
	"trace":     0,
	"traces":    0,
	"cuda":      1,
	"replay":    2,
	"allocator": 3,
	"analysis":  4,
	"internal":  5,
	"cmd":       5,
}

// only lists imports allowed to a few packages alone.
var only = map[string][]string{
	module + "/cuda":           {"cuda", "internal", "cmd"},
	"github.com/urfave/cli/v2": {"internal/cli", "cmd"},
	"gonum.org/v1/plot":        {"analysis/plot"},
}

func top(rel string) string { return strings.Split(rel, "/")[0] }

func TestLayering(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n != "." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "build" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		from, ok := rank[top(rel)]
		if !ok {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		external := strings.HasSuffix(f.Name.Name, "_test") // a test package of its own may drive the layers above
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for prefix, allowed := range only {
				if p == prefix || strings.HasPrefix(p, prefix+"/") {
					ok := false
					for _, a := range allowed {
						if rel == a || strings.HasPrefix(rel, a+"/") {
							ok = true
						}
					}
					if !ok {
						t.Errorf("%s imports %s, which only %v may import", path, p, allowed)
					}
				}
			}
			if !strings.HasPrefix(p, module+"/") {
				continue
			}
			to, ok := rank[top(strings.TrimPrefix(p, module+"/"))]
			if ok && to > from && !external {
				t.Errorf("%s (in %s) imports %s: data flows trace -> cuda -> replay -> allocator -> analysis -> cli; a package never imports one to its right", path, rel, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the walk rooted at the module?", checked)
	}
}
