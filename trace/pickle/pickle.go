package pickle

import (
	"errors"
	"fmt"
)

// ErrUnsafe is matched (errors.Is) by the error for an opcode that would
// construct an object or call code.
var ErrUnsafe = errors.New("refused: the opcode constructs objects or calls code")

// ErrTruncated is matched (errors.Is) by the error for input that ends
// before the pickle's STOP opcode.
var ErrTruncated = errors.New("pickle ends early")

// ErrMalformed is matched (errors.Is) by every other decoding error.
var ErrMalformed = errors.New("malformed pickle")

// Error is a decoding error at a byte offset of the input.
type Error struct {
	Offset int64  // byte offset of the opcode (or of the input's end)
	Op     byte   // the opcode at Offset (0 when none)
	Msg    string // what was wrong
	Err    error  // ErrUnsafe, ErrTruncated or ErrMalformed
}

func (e *Error) Error() string {
	if e.Op != 0 {
		return fmt.Sprintf("pickle: byte offset %d: opcode %s (0x%02x): %s", e.Offset, OpName(e.Op), e.Op, e.Msg)
	}
	return fmt.Sprintf("pickle: byte offset %d: %s", e.Offset, e.Msg)
}

// Unwrap returns the error class.
func (e *Error) Unwrap() error { return e.Err }

// Tuple is a decoded Python tuple.
type Tuple []any

// List is a decoded Python list.
type List struct {
	Items []any
}

// Pair is one key/value pair of a Dict.
type Pair struct {
	Key   string
	Value any
}

// Dict is a decoded Python dict with string keys, in insertion order.
type Dict struct {
	Pairs []Pair
	index map[string]int // built once the dict grows past linearLimit
}

const linearLimit = 16

// Len returns the number of pairs.
func (d *Dict) Len() int { return len(d.Pairs) }

// Get returns the value stored under key.
func (d *Dict) Get(key string) (any, bool) {
	if d.index != nil {
		i, ok := d.index[key]
		if !ok {
			return nil, false
		}
		return d.Pairs[i].Value, true
	}
	for i := range d.Pairs {
		if d.Pairs[i].Key == key {
			return d.Pairs[i].Value, true
		}
	}
	return nil, false
}

// Set stores value under key, replacing an earlier value as Python does.
func (d *Dict) Set(key string, value any) {
	if d.index != nil {
		if i, ok := d.index[key]; ok {
			d.Pairs[i].Value = value
			return
		}
		d.index[key] = len(d.Pairs)
		d.Pairs = append(d.Pairs, Pair{key, value})
		return
	}
	for i := range d.Pairs {
		if d.Pairs[i].Key == key {
			d.Pairs[i].Value = value
			return
		}
	}
	d.Pairs = append(d.Pairs, Pair{key, value})
	if len(d.Pairs) > linearLimit {
		d.index = make(map[string]int, 2*len(d.Pairs))
		for i, p := range d.Pairs {
			d.index[p.Key] = i
		}
	}
}

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []string {
	keys := make([]string, len(d.Pairs))
	for i, p := range d.Pairs {
		keys[i] = p.Key
	}
	return keys
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64, uint64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case Tuple:
		return "tuple"
	case *List:
		return "list"
	case *Dict:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

// TypeName returns the Python type name of a decoded value.
func TypeName(v any) string { return typeName(v) }
