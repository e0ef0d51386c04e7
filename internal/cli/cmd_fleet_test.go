package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestFleetWithoutItsBinary: without fragsim-fleet beside the binary or on
// PATH, `fragsim fleet` says how to build it and exits 1.
func TestFleetWithoutItsBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out, errb bytes.Buffer
	code := Main([]string{"fragsim", "fleet", "traces/", "--out", t.TempDir()}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "fragsim-fleet is not beside fragsim nor on PATH") ||
		!strings.Contains(errb.String(), "./cmd/fragsim-fleet") {
		t.Errorf("exit %d, %q: want 1 and how to build fragsim-fleet", code, errb.String())
	}
}
