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
	"unicode"

	"github.com/fragsim/fragsim/allocator"
)

// TestAnalysisNamesNoPolicy checks that analysis, and the packages under
// it, name no allocator policy: every fact of a policy comes from the
// registry (allocator.Facts), so that adding a policy is its package and a
// registry entry. A string literal of a non-test file that holds a
// registered name or alias as a word (caching, "caching+...", "the ideal
// run") fails; a word that only begins with one (expandable_segments) does
// not. The names come from the registry, so the list cannot go stale.
func TestAnalysisNamesNoPolicy(t *testing.T) {
	names := map[string]bool{}
	for _, f := range allocator.All() {
		names[f.Name] = true
		for _, a := range f.Aliases {
			names[a] = true
		}
	}
	if len(names) < 2 {
		t.Fatalf("the registry holds %d names", len(names))
	}
	root, err := filepath.Abs("../../analysis")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, w := range words(s) {
				if names[strings.ToLower(w)] {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("analysis/%s:%d: the string %q names the policy %q: ask the registry (allocator.Facts)",
						filepath.ToSlash(rel), fset.Position(lit.Pos()).Line, s, w)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 20 {
		t.Fatalf("checked only %d files: is the walk rooted at analysis?", files)
	}
}

// words splits s into its words: runs of letters, digits and '_'.
func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_'
	})
}

func TestWords(t *testing.T) {
	got := words(`caching+max_split_size_mb:64, "ideal" expandable_segments:True`)
	want := []string{"caching", "max_split_size_mb", "64", "ideal", "expandable_segments", "True"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("words = %q, want %q", got, want)
	}
}
