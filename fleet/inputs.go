package fleet

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// traceExts are the endings of the files a directory is searched for:
// traces, PyTorch snapshots (plain, gzip'd or zstd'd) and RMM logs.
var traceExts = []string{".fst", ".pickle", ".pkl", ".pickle.gz", ".pkl.gz", ".pickle.zst", ".pkl.zst", ".pickle.zstd", ".csv"}

// IsTraceName reports whether a file found in a directory is one the fleet
// reads (by its name: see traceExts).
func IsTraceName(name string) bool {
	n := strings.ToLower(name)
	for _, e := range traceExts {
		if strings.HasSuffix(n, e) {
			return true
		}
	}
	return false
}

// HasScheme reports whether an input names a remote file (gs://bucket/x):
// such inputs are matched by the engine's filesystems, not here.
func HasScheme(in string) bool {
	i := strings.Index(in, "://")
	return i > 0 && !strings.ContainsAny(in[:i], "/.")
}

// Expand turns the command line's inputs into the list of inputs to
// analyse, each once, in the order given (a directory's files sorted):
//   - a file is itself, whatever its name;
//   - a directory is every file under it whose name IsTraceName;
//   - a pattern with *, ? or [ that names no file is a glob (filepath.Glob);
//   - @FILE is the inputs listed in FILE, one a line (blank lines and
//     lines starting with # skipped), each expanded in turn;
//   - an input with a scheme (gs://...) is kept as it is.
//
// An input that matches nothing is an error naming it: a fleet with a
// mistyped path would otherwise answer for less than was asked.
func Expand(args []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	var expand func(a string, depth int) error
	expand = func(a string, depth int) error {
		if HasScheme(a) {
			add(a)
			return nil
		}
		if strings.HasPrefix(a, "@") && len(a) > 1 {
			if depth > 8 {
				return fmt.Errorf("%s: lists nest more than 8 deep", a)
			}
			list, err := readList(a[1:])
			if err != nil {
				return err
			}
			for _, l := range list {
				if err := expand(l, depth+1); err != nil {
					return fmt.Errorf("%s: %w", a[1:], err)
				}
			}
			return nil
		}
		st, err := os.Stat(a)
		switch {
		case err == nil && st.IsDir():
			return walkDir(a, add)
		case err == nil:
			add(a)
			return nil
		case strings.ContainsAny(a, "*?["):
			m, gerr := filepath.Glob(a)
			if gerr != nil {
				return fmt.Errorf("%s: %w", a, gerr)
			}
			if len(m) == 0 {
				return fmt.Errorf("%s: no file matches", a)
			}
			for _, p := range m {
				if st, err := os.Stat(p); err == nil && st.IsDir() {
					if err := walkDir(p, add); err != nil {
						return err
					}
				} else {
					add(p)
				}
			}
			return nil
		}
		return err
	}
	for _, a := range args {
		if err := expand(a, 0); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// walkDir adds the trace files under dir, sorted, skipping hidden
// directories (a fleet's own scratch among them).
func walkDir(dir string, add func(string)) error {
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && IsTraceName(d.Name()) {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(found)
	for _, p := range found {
		add(p)
	}
	return nil
}

// readList reads an @list file: one input a line.
func readList(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
