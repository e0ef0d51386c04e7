package readme

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A Command is one shell command of the README, as written.
type Command struct {
	Text string // the command line, whitespace collapsed
	Line int    // the README's line it starts on
}

// shellFences are the info strings of the fenced blocks that hold shell
// commands, one a line.
var shellFences = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// programs are the first words of an inline code span that make it a
// command: the span then runs them with at least one argument (two for
// fragsim and pip: see isCommand).
var programs = map[string]bool{"fragsim": true, "go": true, "python3": true, "python": true, "pip": true, "pip3": true}

var (
	inlineSpan = regexp.MustCompile("`([^`]+)`")
	envAssign  = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=\S*$`)
)

// Commands returns the README's shell commands in the order they appear,
// each once: every line of a fenced sh block (a trailing backslash joins
// the next; # comments skipped), and every inline code span that runs a
// program (programs, after any VAR=value settings) or an executable of
// the repository (bench/faults.sh, .ci/run; build/ is what cuda/build.sh
// makes). root is the repository's root.
func Commands(root string) ([]Command, error) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return nil, err
	}
	return parse(root, string(b)), nil
}

// parse returns the commands of the README text (see Commands).
func parse(root, readme string) []Command {
	var all []Command
	add := func(text string, line int) {
		if text = strings.Join(strings.Fields(text), " "); text != "" {
			all = append(all, Command{text, line})
		}
	}
	lines := strings.Split(readme, "\n")
	var prose strings.Builder // the text outside fenced blocks, line for line
	fence, shell, pending, pendingLine := "", false, "", 0
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "```") {
			if fence == "" {
				fence = "```"
				shell = shellFences[strings.TrimSpace(strings.TrimPrefix(t, "```"))]
			} else {
				fence, shell = "", false
			}
			prose.WriteByte('\n')
			continue
		}
		if fence == "" {
			prose.WriteString(l)
			prose.WriteByte('\n')
			continue
		}
		prose.WriteByte('\n')
		if !shell || (pending == "" && (t == "" || strings.HasPrefix(t, "#"))) {
			continue
		}
		if pending == "" {
			pendingLine = i + 1
		}
		if c, ok := strings.CutSuffix(t, `\`); ok {
			pending += c + " "
			continue
		}
		add(pending+t, pendingLine)
		pending = ""
	}
	text := prose.String()
	for _, m := range inlineSpan.FindAllStringSubmatchIndex(text, -1) {
		span := text[m[2]:m[3]]
		if isCommand(root, span) {
			add(span, strings.Count(text[:m[0]], "\n")+1)
		}
	}
	sortByLine(all)
	var out []Command
	seen := map[string]bool{}
	for _, c := range all {
		if !seen[c.Text] {
			seen[c.Text] = true
			out = append(out, c)
		}
	}
	return out
}

// isCommand says whether an inline code span runs something.
func isCommand(root, span string) bool {
	words := strings.Fields(span)
	for len(words) > 0 && envAssign.MatchString(words[0]) {
		words = words[1:]
	}
	if len(words) == 0 {
		return false
	}
	if programs[words[0]] {
		// `fragsim analyze` or `pip install` in a sentence names a command:
		// one word after the program, not a flag, runs nothing.
		mention := len(words) == 2 && (words[0] == "fragsim" || strings.HasPrefix(words[0], "pip")) && !strings.HasPrefix(words[1], "-")
		return len(words) > 1 && !mention
	}
	if strings.HasPrefix(words[0], "build/") {
		return true
	}
	if !strings.Contains(words[0], "/") {
		return false
	}
	st, err := os.Stat(filepath.Join(root, words[0]))
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// sortByLine orders commands by the line they start on (the fenced and
// inline ones were found apart), stably.
func sortByLine(c []Command) {
	for i := 1; i < len(c); i++ {
		for j := i; j > 0 && c[j].Line < c[j-1].Line; j-- {
			c[j], c[j-1] = c[j-1], c[j]
		}
	}
}

func TestParse(t *testing.T) {
	readme := "Run `fragsim analyze` (a mention) or `fragsim compare t.fst`, `go.mod` is a file,\n" +
		"`bench/faults.sh` and `traces/README.md`; `FRAGSIM_X=1\nfragsim replay t.fst` spans a line.\n" +
		"```sh\n# a comment\nfragsim import s.pickle \\\n  -o s.fst\n\nfragsim compare t.fst\n```\n" +
		"```\nRecommended: not a command\n```\n" +
		"```python\nfragsim.compare(\"x\")\n```\n"
	var got []string
	for _, c := range parse(root, readme) {
		got = append(got, fmt.Sprintf("%d %s", c.Line, c.Text))
	}
	want := []string{"1 fragsim compare t.fst", "2 bench/faults.sh", "2 FRAGSIM_X=1 fragsim replay t.fst", "6 fragsim import s.pickle -o s.fst"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("commands\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
