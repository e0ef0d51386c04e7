package cli

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestInterspersedFlags(t *testing.T) {
	app := NewApp(nil, nil)
	cases := []struct{ in, want []string }{
		{[]string{"fragsim", "replay", "t.fst", "--json", "--policy", "expandable"},
			[]string{"fragsim", "replay", "--json", "--policy", "expandable", "t.fst"}},
		{[]string{"fragsim", "replay", "--policy=bfc", "t.fst", "--capacity", "24GiB"},
			[]string{"fragsim", "replay", "--policy=bfc", "--capacity", "24GiB", "t.fst"}},
		{[]string{"fragsim", "record", "-o", "x.fst", "--", "python", "s.py", "--json"},
			[]string{"fragsim", "record", "-o", "x.fst", "--", "python", "s.py", "--json"}},
		{[]string{"fragsim", "nosuch", "a", "--b"}, []string{"fragsim", "nosuch", "a", "--b"}},
	}
	for _, c := range cases {
		if got := interspersed(app, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("interspersed(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestUsageErrorsExit2 checks that every kind of usage error exits 2, and a
// bad input file 1.
func TestUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"info"}, 2},
		{[]string{"dump", "a", "b"}, 2},
		{[]string{"undump"}, 2},
		{[]string{"replay"}, 2},
		{[]string{"synth"}, 2},                         // -o is required
		{[]string{"replay", "--no-such-flag", "x"}, 2}, // unknown flag
		{[]string{"synth", "-o", "x", "--events", "many"}, 2},
		{[]string{"record", "--tag", "no-equals-sign", "--", "true"}, 2},
		{[]string{"record", "--tag", "=value", "--", "true"}, 2},
		{[]string{"info", "/nonexistent/trace.fst"}, 1},
	} {
		var out, errOut bytes.Buffer
		if got := Main(append([]string{"fragsim"}, tc.args...), &out, &errOut); got != tc.want {
			t.Errorf("fragsim %v: exit %d, want %d (%s)", tc.args, got, tc.want, errOut.String())
		}
		if !strings.HasPrefix(errOut.String(), "fragsim: ") && !strings.Contains(errOut.String(), "fragsim: ") {
			t.Errorf("fragsim %v: no error message: %q", tc.args, errOut.String())
		}
	}
}
