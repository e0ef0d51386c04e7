package trace

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// initialKey starts the initial state in a header as the writer encodes
// it: Initial is Header's last field, so the header ends with it. The
// bytes cannot occur elsewhere in a header: a quote inside a string is
// escaped, and the maps of a header hold strings, not objects.
const initialKey = `,"initial":{"segments":[`

// unmarshalHeader is json.Unmarshal(p, h), faster for a header with an
// initial state as the writer encodes it (tens of thousands of blocks
// take encoding/json milliseconds): the segments are parsed by hand, the
// rest by encoding/json. Anything else in the segments (other keys or
// their order, spaces, escapes, null, numbers out of range) is left to
// encoding/json for the whole header, so the result and the errors are
// always json.Unmarshal's.
func unmarshalHeader(p []byte, h *Header) error {
	if i := bytes.LastIndex(p, []byte(initialKey)); i > 0 {
		if segs, ok := parseSegments(p[i+len(initialKey)-1:]); ok {
			rest := make([]byte, i+1)
			copy(rest, p[:i])
			rest[i] = '}'
			var hh Header
			if json.Unmarshal(rest, &hh) == nil && hh.Initial == nil {
				hh.Initial = &InitialState{Segments: segs}
				*h = hh
				return nil
			}
		}
	}
	return json.Unmarshal(p, h)
}

// segParser reads the segments of an initial state in the writer's form.
type segParser struct {
	p  []byte
	i  int
	ok bool
}

// parseSegments parses p, which must be the initial state's segment
// array followed by the closing braces of the initial state and of the
// header, and nothing else: [{"device":0,"stream":0,"addr":1,"size":2,
// "pool":"small","expandable":true,"blocks":[{"addr":1,"size":2,
// "requested":2,"state":"inactive"}]}]}}, with "expandable" and
// "requested" left out when false or zero. It reports false for anything
// else.
func parseSegments(p []byte) ([]Segment, bool) {
	s := segParser{p: p, ok: true}
	segs := []Segment{}
	s.lit("[")
	s.list(func() {
		var g Segment
		s.lit(`{"device":`)
		g.Device = DeviceID(s.int32())
		s.lit(`,"stream":`)
		g.Stream = StreamID(s.uint())
		s.lit(`,"addr":`)
		g.Addr = s.uint()
		s.lit(`,"size":`)
		g.SizeBytes = s.uint()
		s.lit(`,"pool":`)
		g.Pool = s.str()
		if s.has(`,"expandable":true`) {
			g.Expandable = true
		}
		s.lit(`,"blocks":[`)
		g.Blocks = []Block{}
		s.list(func() {
			var b Block
			s.lit(`{"addr":`)
			b.Addr = s.uint()
			s.lit(`,"size":`)
			b.SizeBytes = s.uint()
			if s.has(`,"requested":`) {
				b.RequestedBytes = s.uint()
				if b.RequestedBytes == 0 {
					s.ok = false // the writer leaves a zero out
				}
			}
			s.lit(`,"state":`)
			b.State = BlockState(s.str())
			s.lit("}")
			g.Blocks = append(g.Blocks, b)
		})
		s.lit("}")
		segs = append(segs, g)
	})
	s.lit("}}")
	if !s.ok || s.i != len(s.p) {
		return nil, false
	}
	return segs, true
}

// list parses the items of an array whose "[" is read, and its "]":
// item reads one.
func (s *segParser) list(item func()) {
	if s.peek(']') {
		s.i++
		return
	}
	for s.ok {
		item()
		if !s.has(",") {
			break
		}
	}
	s.lit("]")
}

func (s *segParser) peek(c byte) bool { return s.ok && s.i < len(s.p) && s.p[s.i] == c }

// has consumes lit when p continues with it.
func (s *segParser) has(lit string) bool {
	if s.ok && bytes.HasPrefix(s.p[s.i:], []byte(lit)) {
		s.i += len(lit)
		return true
	}
	return false
}

// lit consumes lit, which p must continue with.
func (s *segParser) lit(lit string) {
	if !s.has(lit) {
		s.ok = false
	}
}

// uint consumes an unsigned decimal integer in JSON's form (no leading
// zero, no sign, fraction or exponent) that fits in 64 bits.
func (s *segParser) uint() uint64 {
	if !s.ok {
		return 0
	}
	p, i := s.p, s.i
	if i >= len(p) || p[i] < '0' || p[i] > '9' || (p[i] == '0' && i+1 < len(p) && p[i+1] >= '0' && p[i+1] <= '9') {
		s.ok = false
		return 0
	}
	var v uint64
	for ; i < len(p) && p[i] >= '0' && p[i] <= '9'; i++ {
		d := uint64(p[i] - '0')
		if v > (1<<64-1-d)/10 {
			s.ok = false
			return 0
		}
		v = v*10 + d
	}
	if i < len(p) && (p[i] == '.' || p[i] == 'e' || p[i] == 'E') {
		s.ok = false
		return 0
	}
	s.i = i
	return v
}

// int32 consumes a decimal integer that fits in 32 bits.
func (s *segParser) int32() int32 {
	neg := s.has("-")
	v := s.uint()
	if v > 1<<31 || (!neg && v == 1<<31) || (neg && v == 0) {
		s.ok = false
		return 0
	}
	if neg {
		return int32(-int64(v))
	}
	return int32(v)
}

// str consumes a string with no escape and no control character.
func (s *segParser) str() string {
	if !s.has(`"`) {
		return ""
	}
	p := s.p[s.i:]
	for j, c := range p {
		switch {
		case c == '"':
			s.i += j + 1
			return string(p[:j])
		case c == '\\' || c < 0x20 || c >= 0x80:
			s.ok = false
			return ""
		}
	}
	s.ok = false
	return ""
}

// marshalHeader is json.Marshal(h), byte for byte, faster for a header
// with an initial state: the segments, which may be thousands of blocks,
// are appended by hand (encoding/json's reflection would run on the
// goroutine that then writes every event), the rest by encoding/json. Initial is Header's last field (see initialKey).
func marshalHeader(h *Header) ([]byte, error) {
	if h.Initial == nil || h.Initial.Segments == nil {
		return json.Marshal(h)
	}
	rest := *h
	rest.Initial = nil
	p, err := json.Marshal(&rest)
	if err != nil {
		return nil, err
	}
	n := len(p) + len(initialKey) + 4
	for i := range h.Initial.Segments {
		n += 120 + 80*len(h.Initial.Segments[i].Blocks)
	}
	out := make([]byte, 0, n)
	out = append(out, p[:len(p)-1]...) // without its closing brace
	out = append(out, initialKey...)
	for i := range h.Initial.Segments {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendSegment(out, &h.Initial.Segments[i])
	}
	return append(out, "]}}"...), nil
}

// appendSegment appends s as encoding/json writes it.
func appendSegment(b []byte, s *Segment) []byte {
	b = append(b, `{"device":`...)
	b = strconv.AppendInt(b, int64(s.Device), 10)
	b = append(b, `,"stream":`...)
	b = strconv.AppendUint(b, uint64(s.Stream), 10)
	b = append(b, `,"addr":`...)
	b = strconv.AppendUint(b, s.Addr, 10)
	b = append(b, `,"size":`...)
	b = strconv.AppendUint(b, s.SizeBytes, 10)
	b = append(b, `,"pool":`...)
	b = appendJSONString(b, s.Pool)
	if s.Expandable {
		b = append(b, `,"expandable":true`...)
	}
	b = append(b, `,"blocks":`...)
	if s.Blocks == nil {
		return append(b, "null}"...)
	}
	b = append(b, '[')
	for i := range s.Blocks {
		k := &s.Blocks[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"addr":`...)
		b = strconv.AppendUint(b, k.Addr, 10)
		b = append(b, `,"size":`...)
		b = strconv.AppendUint(b, k.SizeBytes, 10)
		if k.RequestedBytes != 0 {
			b = append(b, `,"requested":`...)
			b = strconv.AppendUint(b, k.RequestedBytes, 10)
		}
		b = append(b, `,"state":`...)
		b = appendJSONString(b, string(k.State))
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendJSONString appends s quoted as encoding/json quotes it: printable
// ASCII but for the quote, the backslash and <, > and & (escaped as
// HTML-safe) as it is; anything else through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
