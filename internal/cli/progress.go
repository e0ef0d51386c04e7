package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
)

// progressLine is the one progress display of every long command: a line
// on stderr that updates in place. It draws only when stderr is a
// terminal (never into a file or a pipe, where `\r` would garble the log)
// and never under -q, and only once the work has run for a second.
//
// Use:
//
//	p := startProgress(c.App.ErrWriter, "import", c.Bool("quiet"))
//	... p.update("%d / %d events", n, total) as often as convenient (it
//	    redraws at most five times a second; safe from several goroutines)
//	p.done() // clears the line; call it before printing results
//
// A nil *progressLine, and one that is not drawing, accept every call, so
// a command may skip work that only feeds the display with p.active().
type progressLine struct {
	mu    sync.Mutex
	w     io.Writer
	what  string
	start time.Time
	last  time.Time
	shown bool
}

// isTerminal says whether w is a terminal; tests replace it.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// quietFlag is -q, --quiet: every command that can draw a progress line
// takes it.
func quietFlag() cli.Flag {
	return &cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress line on stderr (drawn only on a terminal)"}
}

// startProgress returns the progress line of the command what, writing to
// w (stderr). It returns nil, which draws nothing, when quiet is set or w
// is not a terminal.
func startProgress(w io.Writer, what string, quiet bool) *progressLine {
	if quiet || !isTerminal(w) {
		return nil
	}
	return &progressLine{w: w, what: what, start: time.Now()}
}

// active says whether the line is drawn at all.
func (p *progressLine) active() bool { return p != nil }

// update redraws the line with the message format, args (printf-style),
// after the work's first second and at most five times a second.
func (p *progressLine) update(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.start) < time.Second || (p.shown && now.Sub(p.last) < 200*time.Millisecond) {
		return
	}
	p.last, p.shown = now, true
	fmt.Fprintf(p.w, "\r\033[Kfragsim %s: %s (%.0f s)", p.what, fmt.Sprintf(format, args...), now.Sub(p.start).Seconds())
}

// done clears the line, if one was drawn.
func (p *progressLine) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// replays is the Progress of analysis.CompareOptions and AnalyzeOptions:
// the replays done and the events replayed over all of them.
func (p *progressLine) replays(events int64, done, runs int) {
	p.update("%d/%d replays done, %s events replayed", done, runs, fmtMillions(events))
}
