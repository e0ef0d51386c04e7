package trace

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestPrintable(t *testing.T) {
	for _, c := range []struct{ in, want, lines string }{
		{"plain name.py:12", "plain name.py:12", "plain name.py:12"},
		{"naïve_√", "naïve_√", "naïve_√"},
		{`C:\path\f.py`, `C:\path\f.py`, `C:\path\f.py`},
		{"f\x1b]0;TITLE\x07", `f\x1b]0;TITLE\a`, `f\x1b]0;TITLE\a`},
		{"\x1b]52;c;aGk=\x07", `\x1b]52;c;aGk=\a`, `\x1b]52;c;aGk=\a`},
		{"a\x1b[2Jb", `a\x1b[2Jb`, `a\x1b[2Jb`},
		{"two\nlines\tx\r", `two\nlines\tx\r`, "two\nlines\tx\\r"},
		{"\u009b31m", `\u009b31m`, `\u009b31m`},
		{"abc\u202edef", `abc\u202edef`, `abc\u202edef`},
		{"bad\xffutf8", `bad\xffutf8`, `bad\xffutf8`},
		{"\U000e0001tag", `\U000e0001tag`, `\U000e0001tag`},
	} {
		if got := Printable(c.in); got != c.want {
			t.Errorf("Printable(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := PrintableLines(c.in); got != c.lines {
			t.Errorf("PrintableLines(%q) = %q, want %q", c.in, got, c.lines)
		}
	}
}

func TestPrintableWriter(t *testing.T) {
	var b strings.Builder
	w := PrintableWriter(&b)
	fmt.Fprintf(w, "frame\t%s\n", "f\x1b]0;T\x07")
	if got, want := b.String(), "frame\tf\\x1b]0;T\\a\n"; got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
}

// The header line of dump: its strings read back the same, and it holds
// nothing a terminal acts on.
func TestPrintableJSON(t *testing.T) {
	in := map[string]string{"gpu": "G\x1b]0;T\x07\u202e\u009b\U000e0001 naïve"}
	j, _ := json.Marshal(in)
	p := printableJSON(j)
	if PrintableLines(string(p)) != string(p) {
		t.Errorf("%s holds characters a terminal acts on", p)
	}
	var back map[string]string
	if err := json.Unmarshal(p, &back); err != nil || back["gpu"] != in["gpu"] {
		t.Errorf("%s reads back as %q (%v)", p, back, err)
	}
}
