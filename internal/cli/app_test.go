package cli

import (
	"reflect"
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
