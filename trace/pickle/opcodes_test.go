package pickle

import (
	"errors"
	"strings"
	"testing"
)

// TestOpTable checks the opcode table against itself and against what the
// decoder does with each of the 256 opcodes: the table is the one place
// that decides what a pickle may do.
func TestOpTable(t *testing.T) {
	names := map[string]byte{}
	for i := range opTable {
		op := byte(i)
		info := opTable[op]
		if info.paths != 0 && info.class != opData {
			t.Errorf("opcode 0x%02x (%s): decoded by a fast path but not data", op, info.name)
		}
		if (info.name == "") != (info.class == opUnknown) {
			t.Errorf("opcode 0x%02x: name %q with class %d", op, info.name, info.class)
		}
		if info.name != "" {
			if o, dup := names[info.name]; dup {
				t.Errorf("opcodes 0x%02x and 0x%02x are both %s", o, op, info.name)
			}
			names[info.name] = op
		}
	}
	if len(names) != 68 {
		t.Errorf("%d opcodes named, want the 68 of protocols 0 to 5", len(names))
	}
	for i := range opTable {
		op := byte(i)
		info := opTable[op]
		// The opcode after two values, with zero bytes for its argument.
		data := []byte{opProto, 2, opNone, opNone, op, '0', '\n', 0, 0, 0, 0, 0, 0, 0, 0, opStop}
		for _, stream := range []bool{false, true} {
			d := NewDecoder(data)
			if stream {
				d.StreamEntries("device_traces", &recorder{})
			}
			_, err := d.DecodeDoc()
			var pe *Error
			isErr := errors.As(err, &pe)
			switch info.class {
			case opUnsafe:
				if !errors.Is(err, ErrUnsafe) || !isErr || pe.Offset != 4 || pe.Op != op {
					t.Errorf("%s: err = %v, want ErrUnsafe at offset 4", info.name, err)
				}
			case opUnsupported:
				if !errors.Is(err, ErrMalformed) || !isErr || pe.Offset != 4 || !strings.Contains(err.Error(), "not supported") {
					t.Errorf("%s: err = %v, want not supported at offset 4", info.name, err)
				}
			case opUnknown:
				if !errors.Is(err, ErrMalformed) || !isErr || pe.Offset != 4 || !strings.Contains(err.Error(), "unknown opcode") {
					t.Errorf("0x%02x: err = %v, want unknown opcode at offset 4", op, err)
				}
			case opData:
				// (The filler after it may be an error of its own.)
				if errors.Is(err, ErrUnsafe) || isErr && pe.Offset == 4 && (strings.Contains(err.Error(), "not supported: a memory") || strings.Contains(err.Error(), "unknown opcode")) {
					t.Errorf("%s: err = %v, want it decoded", info.name, err)
				}
			}
		}
	}
}

// TestProtocol0Text checks protocol 0's text arguments against what
// Python's pickle module makes of them.
func TestProtocol0Text(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{`'abc'`, "abc", ""},
		{`"it's"`, "it's", ""},
		{`'a\'b\\c\"'`, `a'b\c"`, ""},
		{`'\x41\101\0\n\t\q'`, "AA\x00\n\t\\q", ""},
		{`'\777'`, "\xff", ""},
		{`abc`, "", "must be quoted"},
		{`'abc"`, "", "must be quoted"},
		{`'\x4'`, "", `invalid \x escape`},
		{`'\xzz'`, "", `invalid \x escape`},
		{`'a\'`, "", "trailing"},
	} {
		got, err := unquoteString(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("STRING %s: err = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("STRING %s = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, want, err string }{
		{`plain`, "plain", ""},
		{"gr\xf6\xdfe \\u2713", "größe ✓", ""},
		{`\u005c\u000a\U0001F600`, "\\\n\U0001F600", ""},
		{`a\\u0041`, `a\\u0041`, ""},
		{`a\\\u0041`, `a\\A`, ""},
		{`x\q\`, `x\q\`, ""},
		{`\u12`, "", "truncated"},
		{`\uzzzz`, "", "truncated"},
		{`\U00110000`, "", "out of range"},
	} {
		got, err := rawUnicodeEscape(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("UNICODE %s: err = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("UNICODE %s = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	// A protocol 0 pickle's STRING and UNICODE decode to str, and a bad
	// argument is an error naming the opcode and its offset.
	v, err := Decode([]byte("(dp0\nVk\xe9\np1\nS'v\\n'\np2\ns."))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := v.(*Dict).Get("ké"); got != "v\n" {
		t.Errorf("decoded %#v", v)
	}
	_, err = Decode([]byte("(dp0\nS'unterminated\np1\n."))
	var pe *Error
	if !errors.As(err, &pe) || pe.Offset != 5 || pe.Op != opString || !errors.Is(err, ErrMalformed) {
		t.Errorf("bad STRING: err = %v, want malformed at offset 5", err)
	}
}
