package cli

import (
	"regexp"
	"strings"
	"testing"
)

// TestVersion checks that --version prints the release number (the wheel
// is named after it, so it must be a plain N.N.N) and, when one is known,
// the commit.
func TestVersion(t *testing.T) {
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(Version) {
		t.Fatalf("Version %q is not N.N.N", Version)
	}
	out, _, code := runCLI("--version")
	if code != 0 || !strings.HasPrefix(out, "fragsim version "+Version) {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	defer func(c string) { Commit = c }(Commit)
	Commit = "0123456789abcdef0123"
	if v := version(); !strings.HasPrefix(v, Version+" commit ") {
		t.Errorf("version() = %q, want %s and a commit", v, Version)
	}
}
