package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

func TestProgressDrawsOnlyOnATerminal(t *testing.T) {
	var buf bytes.Buffer
	if p := startProgress(&buf, "x", false); p.active() {
		t.Fatal("a progress line on a buffer, which is not a terminal")
	}
	saved := isTerminal
	isTerminal = func(io.Writer) bool { return true }
	defer func() { isTerminal = saved }()

	if p := startProgress(&buf, "x", true); p.active() {
		t.Fatal("a progress line under -q")
	}
	p := startProgress(&buf, "synth", false)
	if !p.active() {
		t.Fatal("no progress line on a terminal")
	}
	p.update("%d events", 1)
	if buf.Len() != 0 {
		t.Fatalf("drawn before the work's first second: %q", buf.String())
	}
	p.start = time.Now().Add(-2 * time.Second)
	p.update("%d events", 2)
	p.update("%d events", 3) // within 200 ms of the last: not drawn
	if got := buf.String(); got != "\r\033[Kfragsim synth: 2 events (2 s)" {
		t.Fatalf("line %q", got)
	}
	p.done()
	if !strings.HasSuffix(buf.String(), "\r\033[K") {
		t.Fatalf("done did not clear the line: %q", buf.String())
	}
	var nilp *progressLine
	nilp.update("x")
	nilp.done()
}
