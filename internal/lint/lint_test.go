// Package lint holds tests that check the project's rules: the layering
// of its packages, and the README's figures against bench/RESULTS.md.
package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/fragsim/fragsim"

// rank orders the project's packages the way data flows: a package may
// import packages of a lower rank, and packages of its own rank inside its
// own top folder (trace's subpackages, allocator's policies), never one of
// a higher rank or a package of the same rank elsewhere. A package takes
// the rank of its longest listed prefix.
//
// outfile, which writes output files safely, imports nothing of the
// project, so every package that writes a file may use it. trace stands
// alone beside it; cuda records into traces; replay/driver is the
// contract between the engine and the policies; allocator's policies
// implement it, with the helpers of allocator/internal, and never reach
// the engine (replay), which serves them through the contract alone; the
// registry (allocator) builds the policies; the recording hook
// (cuda/hook) runs PyTorch's allocator (allocator/caching, on a replay
// device) beside its own, to fail allocations where PyTorch would under a
// memory fraction; analysis drives the engine,
// analysis/plot draws what analysis measured; fleet analyses many traces
// through analysis, beside the command line and below the fleet's binary,
// which alone imports Beam; the command line sits on top. traces holds
// data only, in trace files.
var rank = map[string]int{
	"outfile":            0,
	"trace":              1,
	"traces":             2,
	"cuda":               2,
	"replay/driver":      3,
	"allocator/internal": 4,
	"allocator/async":    5,
	"allocator/bfc":      5,
	"allocator/caching":  5,
	"allocator/ideal":    5,
	"allocator/paged":    5,
	"replay":             5,
	"allocator":          6,
	"cuda/hook":          6,
	"analysis":           7,
	"analysis/plot":      8,
	"fleet":              9,
	"internal":           9,
	"cmd":                10,
	"bench":              10,
}

// only lists imports allowed to a few packages alone. The recording hook
// serves its metrics with Prometheus's client library; fragsim.monitor's
// are served by Python, from `fragsim monitor`'s figures.
var only = map[string][]string{
	module + "/cuda":                      {"cuda", "internal", "cmd"},
	"github.com/urfave/cli/v2":            {"internal/cli", "cmd"},
	"gonum.org/v1/plot":                   {"analysis/plot"},
	"github.com/prometheus/client_golang": {"cuda/hook"},
	// Beam, the fleet's engine, is heavy: the fleet's binary alone links it.
	"github.com/apache/beam": {"cmd/fragsim-fleet"},
}

func top(rel string) string { return strings.Split(rel, "/")[0] }

// rankOf returns the rank of the package at rel (a path inside the module)
// and whether one of its prefixes is listed.
func rankOf(rel string) (int, bool) {
	for p := rel; ; {
		if r, ok := rank[p]; ok {
			return r, true
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return 0, false
		}
		p = p[:i]
	}
}

// mayImport reports whether the package at from may import the one at to.
func mayImport(from, to string) bool {
	rf, okf := rankOf(from)
	rt, okt := rankOf(to)
	if !okf || !okt {
		return true
	}
	return rt < rf || rt == rf && top(to) == top(from)
}

func TestRanks(t *testing.T) {
	for _, tt := range []struct {
		from, to string
		ok       bool
	}{
		{"allocator/caching", "replay/driver", true},
		{"allocator/caching", "replay", false},
		{"allocator/internal/fakedev", "replay", false},
		{"allocator/bfc", "allocator/internal/arena", true},
		{"allocator/internal/arena", "allocator/bfc", false},
		{"replay", "replay/driver", true},
		{"replay/driver", "replay", false},
		{"replay", "allocator/caching", false},
		{"replay", "allocator", false},
		{"allocator", "replay", true},
		{"allocator", "allocator/paged", true},
		{"analysis", "allocator", true},
		{"analysis", "analysis/plot", false},
		{"analysis/plot", "analysis", true},
		{"trace/pytorch", "trace/pickle", true},
		{"trace", "cuda", false},
		{"internal/cli", "analysis/plot", true},
		{"trace/pytorch", "outfile", true},
		{"analysis/plot", "outfile", true},
		{"outfile", "trace", false},
		{"outfile", "internal/cli", false},
		{"fleet", "analysis", true},
		{"fleet", "internal/cli", false},
		{"internal/cli", "fleet", false},
		{"cmd/fragsim-fleet", "fleet", true},
	} {
		if got := mayImport(tt.from, tt.to); got != tt.ok {
			t.Errorf("mayImport(%s, %s) = %v, want %v", tt.from, tt.to, got, tt.ok)
		}
	}
}

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
		if _, ok := rankOf(rel); !ok {
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
			if to := strings.TrimPrefix(p, module+"/"); !external && !mayImport(rel, to) {
				rf, _ := rankOf(rel)
				rt, _ := rankOf(to)
				t.Errorf("%s (in %s, rank %d) imports %s (rank %d): see rank in internal/lint", path, rel, rf, to, rt)
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

// maxFuncLines bounds a function outside tests: a longer one is split
// along its steps.
const maxFuncLines = 150

func TestFunctionLength(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
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
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line
			if lines > maxFuncLines {
				t.Errorf("%s: %s is %d lines, over %d: split it along its steps", fset.Position(fn.Pos()), fn.Name.Name, lines, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
