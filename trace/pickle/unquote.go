package pickle

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// Protocol 0's text arguments: STRING's quoted bytes and UNICODE's
// raw-unicode-escape text, decoded as Python's pickle module decodes them.

// unquoteString decodes the argument of STRING: bytes between matching
// single or double quotes, with Python's bytes escapes (codecs.escape_decode).
func unquoteString(s string) ([]byte, error) {
	if len(s) < 2 || s[0] != s[len(s)-1] || (s[0] != '\'' && s[0] != '"') {
		return nil, errors.New("the STRING argument must be quoted")
	}
	s = s[1 : len(s)-1]
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(s) {
			return nil, errors.New("trailing \\ in the STRING argument")
		}
		switch c = s[i]; c {
		case '\\', '\'', '"':
			out = append(out, c)
		case 'a':
			out = append(out, 7)
		case 'b':
			out = append(out, 8)
		case 't':
			out = append(out, 9)
		case 'n':
			out = append(out, 10)
		case 'v':
			out = append(out, 11)
		case 'f':
			out = append(out, 12)
		case 'r':
			out = append(out, 13)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(c - '0')
			for k := 0; k < 2 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '7'; k++ {
				i++
				v = v<<3 | int(s[i]-'0')
			}
			out = append(out, byte(v))
		case 'x':
			if i+3 > len(s) {
				return nil, errors.New("invalid \\x escape in the STRING argument")
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return nil, errors.New("invalid \\x escape in the STRING argument")
			}
			out = append(out, byte(v))
			i += 2
		default:
			out = append(out, '\\', c)
		}
	}
	return out, nil
}

// rawUnicodeEscape decodes the argument of UNICODE, Python's
// raw-unicode-escape: \uXXXX and \UXXXXXXXX (after an odd number of
// backslashes) are code points, every other byte is the Latin-1 one. It
// returns the text as UTF-8.
func rawUnicodeEscape(s string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = utf8.AppendRune(out, rune(c))
			continue
		}
		j := i
		for j < len(s) && s[j] == '\\' {
			j++
		}
		// s[i:j] are backslashes: an odd run escapes what follows.
		if (j-i)%2 == 0 || j >= len(s) || (s[j] != 'u' && s[j] != 'U') {
			out = append(out, s[i:j]...)
			i = j - 1
			continue
		}
		out = append(out, s[i:j-1]...)
		n := 4
		if s[j] == 'U' {
			n = 8
		}
		if j+1+n > len(s) {
			return nil, errors.New("truncated \\uXXXX escape in the UNICODE argument")
		}
		v, err := strconv.ParseUint(s[j+1:j+1+n], 16, 32)
		if err != nil {
			return nil, errors.New("truncated \\uXXXX escape in the UNICODE argument")
		}
		if v > utf8.MaxRune {
			return nil, errors.New("\\U escape out of range in the UNICODE argument")
		}
		out = utf8.AppendRune(out, rune(v))
		i = j + n
	}
	return out, nil
}
