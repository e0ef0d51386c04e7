package pickle

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
)

// step decodes the opcode op at off (d.pos is past it): the general path.
func (d *Decoder) step(off int, op byte) (done bool, err error) {
	data := d.data
	switch op {
	case opBinGet:
		if d.pos >= len(data) {
			return false, d.truncated(off, op, "an argument of 1 bytes")
		}
		v, ok := d.memoGet(uint64(data[d.pos]))
		if !ok {
			return false, d.errAt(off, op, ErrMalformed, "memo index %d was never stored", data[d.pos])
		}
		d.pos++
		d.pushGot(v)
	case opLongBinGet:
		if err := d.need(off, op, 4); err != nil {
			return false, err
		}
		idx := uint64(binary.LittleEndian.Uint32(data[d.pos:]))
		d.pos += 4
		v, ok := d.memoGet(idx)
		if !ok {
			return false, d.errAt(off, op, ErrMalformed, "memo index %d was never stored", idx)
		}
		d.pushGot(v)
	case opMemoize:
		if len(d.stack) == 0 {
			return false, d.errAt(off, op, ErrMalformed, "stack is empty")
		}
		d.memoPut(d.memoLen(), d.top())
	case opMark:
		d.marks = append(d.marks, len(d.stack))
	case opEmptyDict:
		d.pushCont(KindDict)
	case opEmptyList:
		d.pushCont(KindList)
	case opEmptyTuple:
		d.pushCont(KindTuple)
	case opNone:
		d.push(KindNone, 0)
	case opNewTrue:
		d.push(KindBool, 1)
	case opNewFalse:
		d.push(KindBool, 0)
	case opBinInt1:
		if d.pos >= len(data) {
			return false, d.truncated(off, op, "an argument of 1 bytes")
		}
		d.push(KindInt, uint64(data[d.pos]))
		d.pos++
	case opBinInt2:
		if err := d.need(off, op, 2); err != nil {
			return false, err
		}
		d.push(KindInt, uint64(binary.LittleEndian.Uint16(data[d.pos:])))
		d.pos += 2
	case opBinInt:
		if err := d.need(off, op, 4); err != nil {
			return false, err
		}
		d.push(KindInt, uint64(int64(int32(binary.LittleEndian.Uint32(data[d.pos:])))))
		d.pos += 4
	case opLong1, opLong4:
		var n uint64
		if op == opLong1 {
			if err := d.need(off, op, 1); err != nil {
				return false, err
			}
			n = uint64(data[d.pos])
			d.pos++
		} else {
			if err := d.need(off, op, 4); err != nil {
				return false, err
			}
			n4 := int32(binary.LittleEndian.Uint32(data[d.pos:]))
			d.pos += 4
			if n4 < 0 {
				return false, d.errAt(off, op, ErrMalformed, "negative length")
			}
			n = uint64(n4)
		}
		if err := d.need(off, op, n); err != nil {
			return false, err
		}
		k, x, ok := decodeLong(data[d.pos : d.pos+int(n)])
		if !ok {
			return false, d.errAt(off, op, ErrMalformed, "integer of %d bytes does not fit in 64 bits", n)
		}
		d.pos += int(n)
		d.push(k, x)
	case opShortBinUni, opShortBinBytes, opShortBinString:
		if d.pos >= len(data) {
			return false, d.truncated(off, op, "an argument of 1 bytes")
		}
		n := int(data[d.pos])
		d.pos++
		if err := d.need(off, op, uint64(n)); err != nil {
			return false, err
		}
		d.pushStr(data[d.pos : d.pos+n])
		d.pos += n
	case opBinUnicode, opBinBytes, opBinString:
		if err := d.need(off, op, 4); err != nil {
			return false, err
		}
		n := uint64(binary.LittleEndian.Uint32(data[d.pos:]))
		if op == opBinString && int32(n) < 0 {
			return false, d.errAt(off, op, ErrMalformed, "negative length")
		}
		d.pos += 4
		if err := d.need(off, op, n); err != nil {
			return false, err
		}
		d.pushStr(data[d.pos : d.pos+int(n)])
		d.pos += int(n)
	case opBinUnicode8, opBinBytes8, opByteArray8:
		if err := d.need(off, op, 8); err != nil {
			return false, err
		}
		n := binary.LittleEndian.Uint64(data[d.pos:])
		d.pos += 8
		if err := d.need(off, op, n); err != nil {
			return false, err
		}
		d.pushStr(data[d.pos : d.pos+int(n)])
		d.pos += int(n)
	case opSetItems:
		m, err := d.popMark(off, op)
		if err != nil {
			return false, err
		}
		if m == 0 {
			return false, d.errAt(off, op, ErrMalformed, "no dict below the mark")
		}
		if err := d.setItems(off, op, d.stack[m-1], d.stack[m:]); err != nil {
			return false, err
		}
		d.stack = d.stack[:m]
	case opAppends:
		m, err := d.popMark(off, op)
		if err != nil {
			return false, err
		}
		if m == 0 {
			return false, d.errAt(off, op, ErrMalformed, "no list below the mark")
		}
		if err := d.appendList(off, op, d.stack[m-1], d.stack[m:]); err != nil {
			return false, err
		}
		d.stack = d.stack[:m]
	case opSetItem:
		if err := d.have(off, op, 3); err != nil {
			return false, err
		}
		n := len(d.stack)
		if err := d.setItems(off, op, d.stack[n-3], d.stack[n-2:]); err != nil {
			return false, err
		}
		d.stack = d.stack[:n-2]
	case opAppend:
		if err := d.have(off, op, 2); err != nil {
			return false, err
		}
		n := len(d.stack)
		if err := d.appendList(off, op, d.stack[n-2], d.stack[n-1:]); err != nil {
			return false, err
		}
		d.stack = d.stack[:n-1]
	case opBinPut, opLongBinPut, opPut:
		var idx uint64
		switch op {
		case opBinPut:
			if err := d.need(off, op, 1); err != nil {
				return false, err
			}
			idx = uint64(data[d.pos])
			d.pos++
		case opLongBinPut:
			if err := d.need(off, op, 4); err != nil {
				return false, err
			}
			idx = uint64(binary.LittleEndian.Uint32(data[d.pos:]))
			d.pos += 4
		default:
			s, err := d.line(off, op)
			if err != nil {
				return false, err
			}
			u, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return false, d.errAt(off, op, ErrMalformed, "bad memo index %q", s)
			}
			idx = u
		}
		if len(d.stack) == 0 {
			return false, d.errAt(off, op, ErrMalformed, "stack is empty")
		}
		d.memoPut(idx, d.top())
	case opGet:
		s, err := d.line(off, op)
		if err != nil {
			return false, err
		}
		idx, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return false, d.errAt(off, op, ErrMalformed, "bad memo index %q", s)
		}
		v, ok := d.memoGet(idx)
		if !ok {
			return false, d.errAt(off, op, ErrMalformed, "memo index %d was never stored", idx)
		}
		d.pushGot(v)
	case opProto:
		if err := d.need(off, op, 1); err != nil {
			return false, err
		}
		if p := data[d.pos]; p > 5 {
			return false, d.errAt(off, op, ErrMalformed, "protocol %d is not supported (0 to 5 are)", p)
		}
		d.pos++
	case opFrame:
		if err := d.need(off, op, 8); err != nil {
			return false, err
		}
		// The frame length is only a read-ahead hint: the opcodes inside
		// are checked one by one, so a cut frame fails at the opcode it
		// cuts, after everything before it was decoded.
		d.pos += 8
	case opStop:
		if len(d.stack) != 1 || len(d.marks) != 0 {
			if len(d.stack) == 0 {
				return false, d.errAt(off, op, ErrMalformed, "stack is empty")
			}
			return false, d.errAt(off, op, ErrMalformed, "%d values and %d marks left on the stack", len(d.stack), len(d.marks))
		}
		if d.entries != nil && d.stack[0]&tagMask == tagMask {
			return false, ErrNotStreamable
		}
		if d.Progress != nil {
			d.Progress(int64(d.pos), int64(len(d.data)))
		}
		d.doc.root = d.stack[0]
		return true, nil
	case opInt, opLong:
		s, err := d.line(off, op)
		if err != nil {
			return false, err
		}
		if op == opInt && (s == "00" || s == "01") {
			d.push(KindBool, uint64(s[1]-'0'))
			break
		}
		if len(s) > 0 && s[len(s)-1] == 'L' {
			s = s[:len(s)-1]
		}
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			d.push(KindInt, uint64(i))
		} else if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			d.push(KindUint, u)
		} else {
			return false, d.errAt(off, op, ErrMalformed, "bad or too wide integer %q", s)
		}
	case opBinFloat:
		if err := d.need(off, op, 8); err != nil {
			return false, err
		}
		d.push(KindFloat, binary.BigEndian.Uint64(data[d.pos:]))
		d.pos += 8
	case opFloat:
		s, err := d.line(off, op)
		if err != nil {
			return false, err
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return false, d.errAt(off, op, ErrMalformed, "bad float %q", s)
		}
		d.push(KindFloat, math.Float64bits(f))
	case opPop:
		switch {
		case len(d.marks) > 0 && d.marks[len(d.marks)-1] == len(d.stack):
			d.marks = d.marks[:len(d.marks)-1] // Python's POP also pops a bare mark
		case len(d.stack) > 0:
			d.stack = d.stack[:len(d.stack)-1]
		default:
			return false, d.errAt(off, op, ErrMalformed, "stack is empty")
		}
	case opPopMark:
		m, err := d.popMark(off, op)
		if err != nil {
			return false, err
		}
		d.stack = d.stack[:m]
	case opDup:
		if err := d.have(off, op, 1); err != nil {
			return false, err
		}
		d.pushGot(d.top())
	case opTuple1, opTuple2, opTuple3:
		n := int(op-opTuple1) + 1
		if err := d.have(off, op, n); err != nil {
			return false, err
		}
		items := append([]Value(nil), d.stack[len(d.stack)-n:]...)
		d.stack = d.stack[:len(d.stack)-n]
		d.appendItems(d.pushCont(KindTuple), items)
	case opTuple, opList:
		m, err := d.popMark(off, op)
		if err != nil {
			return false, err
		}
		items := append([]Value(nil), d.stack[m:]...)
		d.stack = d.stack[:m]
		k := KindTuple
		if op == opList {
			k = KindList
		}
		d.appendItems(d.pushCont(k), items)
	case opDict:
		m, err := d.popMark(off, op)
		if err != nil {
			return false, err
		}
		items := append([]Value(nil), d.stack[m:]...)
		d.stack = d.stack[:m]
		d.pushCont(KindDict)
		if err := d.setItems(off, op, d.top(), items); err != nil {
			return false, err
		}
	default:
		if isUnsafe(op) {
			return false, &Error{Offset: int64(off), Op: op, Msg: "refused: it would construct an object or call code; a memory snapshot holds only plain data", Err: ErrUnsafe}
		}
		if _, known := opNames[op]; known {
			return false, d.errAt(off, op, ErrMalformed, "not supported: a memory snapshot never holds it")
		}
		return false, &Error{Offset: int64(off), Msg: fmt.Sprintf("unknown opcode 0x%02x", op), Err: ErrMalformed}
	}
	return false, nil
}
