package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// The text twin of the format: one line per event, definition or header,
// for tests and bug reports. WriteText and ReadText round-trip exactly.

// TextMagic is the first line of a text trace.
const TextMagic = "# fragsim text v1"

// WriteText writes the trace r reads as text to w, up to r's end or first
// error. The error of a truncated or corrupt trace is returned after every
// event read before it was written.
//
// A string or stack is written just before its first use, together with
// every definition of a lower ID not yet written, so that IDs stay in
// order and the text does not depend on how the binary file was chunked;
// unused definitions come last.
func WriteText(w io.Writer, r *Reader) error {
	hj, err := json.Marshal(r.Header())
	if err != nil {
		return err
	}
	tw := &textWriter{bw: bufio.NewWriterSize(w, 64<<10), r: r, nStr: 1, nStk: 1}
	tw.bw.WriteString(TextMagic + "\n")
	tw.bw.WriteString("header ")
	tw.bw.Write(printableJSON(hj)) // no raw control in a text meant for terminals and editors
	tw.bw.WriteByte('\n')
	var rerr error
	for {
		e, err := r.ReadEvent()
		if err != nil {
			if err != io.EOF {
				rerr = err
			}
			break
		}
		tw.defineStrings(int(e.Text))
		tw.defineStacks(int(e.Stack))
		tw.line = AppendEventText(tw.line[:0], &e)
		if _, err := tw.bw.Write(append(tw.line, '\n')); err != nil {
			return err
		}
	}
	tw.defineStrings(r.NumStrings() - 1)
	tw.defineStacks(r.NumStacks() - 1)
	if err := tw.bw.Flush(); err != nil {
		return err
	}
	return rerr
}

type textWriter struct {
	bw         *bufio.Writer
	r          *Reader
	line       []byte
	nStr, nStk int // next IDs to define
}

// defineStrings writes the definitions of strings up to id not yet written.
func (tw *textWriter) defineStrings(id int) {
	for ; tw.nStr <= id; tw.nStr++ {
		tw.line = strconv.AppendInt(append(tw.line[:0], "string "...), int64(tw.nStr), 10)
		tw.line = strconv.AppendQuote(append(tw.line, ' '), tw.r.String(StringID(tw.nStr)))
		tw.bw.Write(append(tw.line, '\n'))
	}
}

// defineStacks writes the definitions of stacks up to id not yet written,
// each after the strings it uses.
func (tw *textWriter) defineStacks(id int) {
	for ; tw.nStk <= id; tw.nStk++ {
		frames := tw.r.Stack(StackID(tw.nStk))
		for _, f := range frames {
			tw.defineStrings(int(max(f.Func, f.File)))
		}
		tw.line = strconv.AppendInt(append(tw.line[:0], "stack "...), int64(tw.nStk), 10)
		for _, f := range frames {
			tw.line = append(tw.line, ' ')
			tw.line = strconv.AppendUint(tw.line, uint64(f.Func), 10)
			tw.line = append(tw.line, ':')
			tw.line = strconv.AppendUint(tw.line, uint64(f.File), 10)
			tw.line = append(tw.line, ':')
			tw.line = strconv.AppendUint(tw.line, uint64(f.Line), 10)
		}
		tw.bw.Write(append(tw.line, '\n'))
	}
}

// AppendEventText appends the text-twin line of e, without its newline.
func AppendEventText(b []byte, e *Event) []byte {
	b = append(b, e.Kind.String()...)
	b = append(b, " t="...)
	b = strconv.AppendInt(b, e.TimeNS, 10)
	b = append(b, " dev="...)
	b = strconv.AppendInt(b, int64(e.Device), 10)
	b = append(b, " stream=0x"...)
	b = strconv.AppendUint(b, uint64(e.Stream), 16)
	var sp field
	if e.Kind.Valid() {
		sp = kindFields[e.Kind]
	}
	f := sp | fieldsOf(e)
	if f&fieldAddr != 0 {
		b = append(b, " addr=0x"...)
		b = strconv.AppendUint(b, e.Addr, 16)
	}
	if f&fieldSize != 0 {
		b = append(b, " size="...)
		b = strconv.AppendUint(b, e.SizeBytes, 10)
	}
	if f&fieldAux != 0 {
		if fr := math.Float64frombits(e.Aux); e.Kind == KindSetFraction && exactFloat(fr, e.Aux) {
			b = append(b, " fraction="...)
			b = strconv.AppendFloat(b, fr, 'g', -1, 64)
		} else {
			b = append(b, " aux="...)
			b = strconv.AppendUint(b, e.Aux, 10)
		}
	}
	if f&fieldMarker != 0 {
		b = append(b, " marker="...)
		b = append(b, e.Marker.String()...)
	}
	if f&fieldText != 0 {
		b = append(b, " text="...)
		b = strconv.AppendUint(b, uint64(e.Text), 10)
	}
	if e.Stack != NoStack {
		b = append(b, " stack="...)
		b = strconv.AppendUint(b, uint64(e.Stack), 10)
	}
	return b
}

// exactFloat reports whether f prints and parses back to bits.
func exactFloat(f float64, bits uint64) bool {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return false
	}
	g, err := strconv.ParseFloat(strconv.FormatFloat(f, 'g', -1, 64), 64)
	return err == nil && math.Float64bits(g) == bits
}

// TextError is a syntax error in a text trace.
type TextError struct {
	Line int    // 1-based line number
	Msg  string // what was expected and what was found
}

func (e *TextError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// TextReader parses a text trace. It refuses, naming the line and the
// event, any value no trace should hold (Header.CheckEvent): a size past
// the device's memory (or 2^48), a fraction outside (0, 1], NaN and
// infinities.
type TextReader struct {
	// Raw, when set, makes CopyTo take every value the binary format can
	// hold, unchecked: the text twin of any binary trace then reads back
	// (tests of the format).
	Raw bool

	sc     *bufio.Scanner
	line   int
	hdr    *Header
	strs   map[uint64]StringID
	stks   map[uint64]StackID
	events int64
}

// NewTextReader reads the magic and header lines of the text trace in r.
func NewTextReader(r io.Reader) (*TextReader, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4*maxStringLen+64)
	t := &TextReader{sc: sc, strs: map[uint64]StringID{0: NoString}, stks: map[uint64]StackID{0: NoStack}}
	l, ok := t.nextLine(false)
	if !ok || l != TextMagic {
		if err := t.sc.Err(); err != nil {
			return nil, t.errf("%v", err)
		}
		return nil, t.errf("want %q, found %q", TextMagic, l)
	}
	l, ok = t.nextLine(true)
	rest, isHeader := strings.CutPrefix(l, "header ")
	if !ok || !isHeader {
		if err := t.sc.Err(); err != nil {
			return nil, t.errf("%v", err)
		}
		return nil, t.errf("want the header line, found %q", l)
	}
	h := new(Header)
	if err := json.Unmarshal([]byte(rest), h); err != nil {
		return nil, t.errf("header JSON: %v", err)
	}
	if err := h.Check(); err != nil {
		return nil, t.errf("header: %v", err)
	}
	t.hdr = h
	return t, nil
}

// nextLine returns the next line, skipping blank lines and, when comments
// is set, lines starting with '#'.
func (t *TextReader) nextLine(comments bool) (string, bool) {
	for t.sc.Scan() {
		t.line++
		l := strings.TrimRight(t.sc.Text(), " \t\r")
		if l == "" || comments && l[0] == '#' {
			continue
		}
		return l, true
	}
	return "", false
}

func (t *TextReader) errf(format string, args ...any) error {
	return &TextError{Line: t.line, Msg: fmt.Sprintf(format, args...)}
}

// Header returns the text trace's header.
func (t *TextReader) Header() *Header { return t.hdr }

// CopyTo parses the rest of the text and writes its definitions and
// events to s. It returns the number of events written.
func (t *TextReader) CopyTo(s Sink) (int64, error) {
	for {
		l, ok := t.nextLine(true)
		if !ok {
			if err := t.sc.Err(); err != nil {
				return t.events, t.errf("%v", err)
			}
			return t.events, nil
		}
		if err := t.parseLine(s, l); err != nil {
			return t.events, err
		}
	}
}

func (t *TextReader) parseLine(s Sink, l string) error {
	word, rest, _ := strings.Cut(l, " ")
	switch word {
	case "string":
		ns, q, _ := strings.Cut(rest, " ")
		n, err := t.defID(ns, "string")
		if err != nil {
			return err
		}
		str, err := strconv.Unquote(q)
		if err != nil {
			return t.errf("string %d: want a quoted string, found %q", n, q)
		}
		t.strs[n] = s.String(str)
		return nil
	case "stack":
		fs := strings.Fields(rest)
		if len(fs) == 0 {
			return t.errf("stack: missing its ID")
		}
		n, err := t.defID(fs[0], "stack")
		if err != nil {
			return err
		}
		frames := make([]Frame, 0, len(fs)-1)
		for _, f := range fs[1:] {
			p := strings.Split(f, ":")
			if len(p) != 3 {
				return t.errf("stack %d: frame %q is not func:file:line", n, f)
			}
			fn, err1 := t.strID(p[0])
			file, err2 := t.strID(p[1])
			line, err3 := strconv.ParseUint(p[2], 10, 32)
			if err := errors.Join(err1, err2); err != nil {
				return err
			}
			if err3 != nil {
				return t.errf("stack %d: bad line number %q", n, p[2])
			}
			frames = append(frames, Frame{Func: fn, File: file, Line: uint32(line)})
		}
		t.stks[n] = s.Stack(frames)
		return nil
	}
	e, err := t.parseEvent(word, rest)
	if err != nil {
		return err
	}
	if err := s.WriteEvent(e); err != nil {
		return t.errf("%v", err)
	}
	t.events++
	return nil
}

// defID parses the ID of a new definition.
func (t *TextReader) defID(s, what string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, t.errf("%s: bad ID %q (want a number from 1)", what, s)
	}
	_, dupStr := t.strs[n]
	_, dupStk := t.stks[n]
	if what == "string" && dupStr || what == "stack" && dupStk {
		return 0, t.errf("%s %d defined twice", what, n)
	}
	return n, nil
}

func (t *TextReader) strID(s string) (StringID, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, t.errf("bad string ID %q", s)
	}
	id, ok := t.strs[n]
	if !ok {
		return 0, t.errf("string %d used before its definition", n)
	}
	return id, nil
}

func (t *TextReader) parseEvent(word, rest string) (Event, error) {
	k, ok := ParseKind(word)
	if !ok {
		return Event{}, t.errf("unknown event kind or line type %q", word)
	}
	e := Event{Kind: k}
	var seen uint16
	for f := range strings.FieldsSeq(rest) {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			return e, t.errf("%s: want key=value, found %q", word, f)
		}
		var bit uint16
		var err error
		switch key {
		case "t":
			bit = 1
			e.TimeNS, err = strconv.ParseInt(val, 10, 64)
		case "dev":
			bit = 2
			var d int64
			d, err = strconv.ParseInt(val, 10, 32)
			e.Device = DeviceID(d)
		case "stream":
			bit = 4
			var v uint64
			v, err = strconv.ParseUint(val, 0, 64)
			e.Stream = StreamID(v)
		case "addr":
			bit = 8
			e.Addr, err = strconv.ParseUint(val, 0, 64)
		case "size":
			bit = 16
			e.SizeBytes, err = strconv.ParseUint(val, 0, 64)
		case "aux":
			bit = 32
			e.Aux, err = strconv.ParseUint(val, 0, 64)
		case "fraction":
			bit = 32
			var v float64
			if v, err = strconv.ParseFloat(val, 64); err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
				err = errors.New("not a finite number")
			}
			e.Aux = math.Float64bits(v)
		case "marker":
			bit = 64
			m, ok := ParseMarkerKind(val)
			if !ok {
				var v uint64
				v, err = strconv.ParseUint(val, 10, 8)
				m = MarkerKind(v)
			}
			e.Marker = m
		case "text":
			bit = 128
			e.Text, err = t.strID(val)
			if err != nil {
				return e, err
			}
		case "stack":
			bit = 256
			var n uint64
			n, err = strconv.ParseUint(val, 10, 32)
			if err == nil {
				id, ok := t.stks[n]
				if !ok {
					return e, t.errf("stack %d used before its definition", n)
				}
				e.Stack = id
			}
		default:
			return e, t.errf("%s: unknown field %q", word, key)
		}
		if err != nil {
			return e, t.errf("%s: bad %s value %q", word, key, val)
		}
		if seen&bit != 0 {
			return e, t.errf("%s: field %q given twice", word, key)
		}
		seen |= bit
	}
	if seen&1 == 0 {
		return e, t.errf("%s: missing t=", word)
	}
	if err := t.hdr.CheckEvent(&e); err != nil && !t.Raw {
		return e, t.errf("%s (event %d): %v", word, t.events, err)
	}
	return e, nil
}

// ReadText parses a whole text trace, writing its definitions and events
// to s, and returns its header.
func ReadText(r io.Reader, s Sink) (*Header, error) {
	t, err := NewTextReader(r)
	if err != nil {
		return nil, err
	}
	_, err = t.CopyTo(s)
	return t.hdr, err
}
