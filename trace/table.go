package trace

import (
	"encoding/binary"
	"math"
)

// Table records.
const (
	recString = 1 // id len bytes
	recStack  = 2 // id nframes (func file line)...
)

func appendStringRecord(dst []byte, id StringID, s string) []byte {
	dst = append(dst, recString)
	dst = binary.AppendUvarint(dst, uint64(id))
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendStackRecord(dst []byte, id StackID, frames []Frame) []byte {
	dst = append(dst, recStack)
	dst = binary.AppendUvarint(dst, uint64(id))
	dst = binary.AppendUvarint(dst, uint64(len(frames)))
	for _, f := range frames {
		dst = binary.AppendUvarint(dst, uint64(f.Func))
		dst = binary.AppendUvarint(dst, uint64(f.File))
		dst = binary.AppendUvarint(dst, uint64(f.Line))
	}
	return dst
}

// tableBudget bounds the memory a trace's strings and stacks take, by
// what its file can hold: tableFloor bytes and tableRatio bytes a byte of
// file read. A table chunk's payload is compressed, so that a small file
// can define strings and stacks of many times its size (a 116 KiB file of
// 1 MiB strings would hold 2.6 GB of them); real traces' tables take a
// small part of their file.
type tableBudget struct {
	used  int64 // bytes taken by the strings and stacks defined so far
	limit int64 // bytes they may take
}

const (
	tableFloor = 64 << 20
	tableRatio = 256
	costString = 16 // a string's header, besides its bytes
	costStack  = 24 // a stack's slice header, besides its frames
	costFrame  = 12 // a Frame
)

// take counts n bytes more, unless that is past the limit.
func (b *tableBudget) take(n int64) bool {
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

// decodeTable appends the definitions of a table chunk to strings and
// stacks; each must define the next ID in order. Each is counted against
// budget before it is allocated.
func decodeTable(p []byte, strings []string, stacks [][]Frame, budget *tableBudget) ([]string, [][]Frame, *decodeError) {
	overBudget := func(what string, id, n uint64) *decodeError {
		return &decodeError{-1, "table chunk: " + what + " " + itoa(id) + " of " + itoa(n) + " bytes would take the strings and stacks past " +
			itoa(uint64(budget.limit)) + " bytes, more than a file of this size can hold"}
	}
	i := 0
	var v uint64
	for i < len(p) {
		tag := p[i]
		i++
		if v, i = uvarint(p, i); i < 0 {
			return strings, stacks, &decodeError{-1, "table chunk: bad varint in id"}
		}
		switch tag {
		case recString:
			if v != uint64(len(strings)) || uint64(len(strings)) >= maxTableIDs {
				return strings, stacks, &decodeError{-1, "table chunk: string " + itoa(v) + " defined where " + itoa(uint64(len(strings))) + " was expected"}
			}
			var l uint64
			if l, i = uvarint(p, i); i < 0 {
				return strings, stacks, &decodeError{-1, "table chunk: bad varint in string length"}
			}
			if l > maxStringLen || l > uint64(len(p)-i) {
				return strings, stacks, &decodeError{-1, "table chunk: string " + itoa(v) + " of " + itoa(l) + " bytes overruns the chunk"}
			}
			if !budget.take(costString + int64(l)) {
				return strings, stacks, overBudget("string", v, l)
			}
			strings = append(strings, string(p[i:i+int(l)]))
			i += int(l)
		case recStack:
			if v != uint64(len(stacks)) || uint64(len(stacks)) >= maxTableIDs {
				return strings, stacks, &decodeError{-1, "table chunk: stack " + itoa(v) + " defined where " + itoa(uint64(len(stacks))) + " was expected"}
			}
			var n uint64
			if n, i = uvarint(p, i); i < 0 {
				return strings, stacks, &decodeError{-1, "table chunk: bad varint in frame count"}
			}
			if n == 0 || n > maxStackFrames || n > uint64(len(p)-i)/3 {
				return strings, stacks, &decodeError{-1, "table chunk: stack " + itoa(v) + " of " + itoa(n) + " frames overruns the chunk"}
			}
			if !budget.take(costStack + costFrame*int64(n)) {
				return strings, stacks, overBudget("stack", v, costStack+costFrame*n)
			}
			frames := make([]Frame, n)
			for k := range frames {
				var fn, file, line uint64
				if fn, i = uvarint(p, i); i < 0 {
					return strings, stacks, &decodeError{-1, "table chunk: bad varint in frame"}
				}
				if file, i = uvarint(p, i); i < 0 {
					return strings, stacks, &decodeError{-1, "table chunk: bad varint in frame"}
				}
				if line, i = uvarint(p, i); i < 0 {
					return strings, stacks, &decodeError{-1, "table chunk: bad varint in frame"}
				}
				if fn >= uint64(len(strings)) || file >= uint64(len(strings)) || line > math.MaxUint32 {
					return strings, stacks, &decodeError{-1, "table chunk: stack " + itoa(v) + " uses an undefined string or a bad line"}
				}
				frames[k] = Frame{Func: StringID(fn), File: StringID(file), Line: uint32(line)}
			}
			stacks = append(stacks, frames)
		default:
			return strings, stacks, &decodeError{-1, "table chunk: unknown record type " + itoa(uint64(tag))}
		}
	}
	return strings, stacks, nil
}
