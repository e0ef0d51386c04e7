package trace

import (
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Printable returns s as it may be shown on a terminal: every rune a
// terminal could act on (ESC and the other C0 and C1 controls, which set
// a window's title, write the clipboard or clear the screen; newlines,
// which forge lines; bidirectional overrides and other invisible format
// characters; bytes that are not UTF-8) is written as Go escapes it
// (\x1b, \n, \u202e, \xff), as `fragsim dump` writes strings. Every other
// rune, and a backslash, is kept, so that names read as they are. Every
// string a text renderer takes from an input (a frame, a marker, a
// setting, a GPU name) goes through it.
func Printable(s string) string {
	if isPrintable(s, false) {
		return s
	}
	return string(appendPrintable(make([]byte, 0, len(s)+16), s, false))
}

// PrintableLines is Printable for text made of lines (a message, a
// table): newlines and tabs are kept, everything else as Printable.
func PrintableLines(s string) string {
	if isPrintable(s, true) {
		return s
	}
	return string(appendPrintable(make([]byte, 0, len(s)+16), s, true))
}

// isPrintable reports whether s needs no escape: printable ASCII (and,
// with lines, newlines and tabs) is checked byte by byte, anything else
// rune by rune.
func isPrintable(s string, lines bool) bool {
	for i := 0; i < len(s); {
		b := s[i]
		if b >= 0x20 && b < 0x7f || lines && (b == '\n' || b == '\t') {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 || !strconv.IsPrint(r) {
			return false
		}
		i += n
	}
	return true
}

func appendPrintable(dst []byte, s string, lines bool) []byte {
	for i := 0; i < len(s); {
		b := s[i]
		if b >= 0x20 && b < 0x7f || lines && (b == '\n' || b == '\t') {
			dst = append(dst, b)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			q := strconv.AppendQuote(nil, s[i:i+1]) // "\xff"
			dst = append(dst, q[1:len(q)-1]...)
		case strconv.IsPrint(r):
			dst = append(dst, s[i:i+n]...)
		default:
			q := strconv.AppendQuoteRune(nil, r) // '\x1b', '\u202e'
			dst = append(dst, q[1:len(q)-1]...)
		}
		i += n
	}
	return dst
}

// PrintableWriter returns a writer that writes what it is given to w as
// PrintableLines does: the writer of a text renderer, so that whatever of
// an input its lines hold cannot act on a terminal. Each Write must hold
// whole runes, as fmt's and text/tabwriter's do. Its Write reports the
// bytes it was given as written.
func PrintableWriter(w io.Writer) io.Writer { return printableWriter{w} }

type printableWriter struct{ w io.Writer }

func (p printableWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, PrintableLines(string(b))); err != nil {
		return 0, err
	}
	return len(b), nil
}

// printableJSON returns the JSON text j (as encoding/json writes it: its
// ASCII controls escaped already) with every other rune Printable would
// escape written as a JSON escape (\u202e; a pair of surrogates past
// U+FFFF), which reads back as the same string.
func printableJSON(j []byte) []byte {
	if isPrintable(string(j), false) {
		return j
	}
	out := make([]byte, 0, len(j)+16)
	for i := 0; i < len(j); {
		r, n := utf8.DecodeRune(j[i:])
		if r < utf8.RuneSelf || strconv.IsPrint(r) || r == utf8.RuneError && n <= 1 {
			out = append(out, j[i:i+n]...)
		} else if r > 0xffff {
			hi, lo := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	return out
}
