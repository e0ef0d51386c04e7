package pickle

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
)

// The general path: every opcode the other paths leave, and every error.

// step decodes the opcode op at off (d.pos is past it). What op may do is
// opTable's to say: an opcode that is not opData is refused before its
// argument is read, and the fixed-size part of an argument is checked
// against the input here, for every opcode alike.
func (d *Decoder) step(off int, op byte) (done bool, err error) {
	info := &opTable[op]
	if info.class != opData {
		return false, d.refuse(off, op, info)
	}
	if n := info.arg.prefix(); n > 0 {
		if err := d.need(off, op, n); err != nil {
			return false, err
		}
	}
	switch op {
	case opBinGet, opLongBinGet, opGet, opMemoize, opBinPut, opLongBinPut, opPut:
		return false, d.stepMemo(off, op)
	case opMark, opPop, opPopMark, opDup, opSetItems, opAppends, opSetItem, opAppend,
		opEmptyDict, opEmptyList, opEmptyTuple, opTuple1, opTuple2, opTuple3, opTuple, opList, opDict:
		return false, d.stepStack(off, op)
	case opProto, opFrame, opStop:
		return d.stepControl(off, op)
	}
	return false, d.stepScalar(off, op)
}

// refuse returns the error for an opcode that is not opData.
func (d *Decoder) refuse(off int, op byte, info *opInfo) error {
	switch info.class {
	case opUnsafe:
		return &Error{Offset: d.abs(off), Op: op, Msg: "refused: it would construct an object or call code; a memory snapshot holds only plain data", Err: ErrUnsafe}
	case opUnsupported:
		return d.errAt(off, op, ErrMalformed, "not supported: a memory snapshot never holds it")
	}
	return &Error{Offset: d.abs(off), Msg: fmt.Sprintf("unknown opcode 0x%02x", op), Err: ErrMalformed}
}

// stepMemo decodes the memo's opcodes.
func (d *Decoder) stepMemo(off int, op byte) error {
	data := d.data
	var idx uint64
	switch op {
	case opBinGet, opBinPut:
		idx = uint64(data[d.pos])
		d.pos++
	case opLongBinGet, opLongBinPut:
		idx = uint64(binary.LittleEndian.Uint32(data[d.pos:]))
		d.pos += 4
	case opGet, opPut:
		s, err := d.line(off, op)
		if err != nil {
			return err
		}
		u, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return d.errAt(off, op, ErrMalformed, "bad memo index %q", s)
		}
		idx = u
	}
	switch op {
	case opBinGet, opLongBinGet, opGet:
		v, ok := d.memoGet(idx)
		if !ok {
			return d.errAt(off, op, ErrMalformed, "memo index %d was never stored", idx)
		}
		d.pushGot(v)
		return nil
	case opMemoize:
		idx = d.memoLen()
	}
	if len(d.stack) == 0 {
		return d.errAt(off, op, ErrMalformed, "stack is empty")
	}
	d.memoPut(idx, d.top())
	return nil
}

// stepStack decodes the opcodes that make containers or move values on
// the stack.
func (d *Decoder) stepStack(off int, op byte) error {
	switch op {
	case opMark:
		d.marks = append(d.marks, len(d.stack))
	case opEmptyDict:
		d.pushCont(KindDict)
	case opEmptyList:
		d.pushCont(KindList)
	case opEmptyTuple:
		d.pushCont(KindTuple)
	case opSetItems, opAppends:
		m, err := d.popMark(off, op)
		if err != nil {
			return err
		}
		if op == opSetItems {
			if m == 0 {
				return d.errAt(off, op, ErrMalformed, "no dict below the mark")
			}
			err = d.setItems(off, op, d.stack[m-1], d.stack[m:])
		} else {
			if m == 0 {
				return d.errAt(off, op, ErrMalformed, "no list below the mark")
			}
			err = d.appendList(off, op, d.stack[m-1], d.stack[m:])
		}
		if err != nil {
			return err
		}
		d.stack = d.stack[:m]
	case opSetItem:
		if err := d.have(off, op, 3); err != nil {
			return err
		}
		n := len(d.stack)
		if err := d.setItems(off, op, d.stack[n-3], d.stack[n-2:]); err != nil {
			return err
		}
		d.stack = d.stack[:n-2]
	case opAppend:
		if err := d.have(off, op, 2); err != nil {
			return err
		}
		n := len(d.stack)
		if err := d.appendList(off, op, d.stack[n-2], d.stack[n-1:]); err != nil {
			return err
		}
		d.stack = d.stack[:n-1]
	case opPop:
		switch {
		case len(d.marks) > 0 && d.marks[len(d.marks)-1] == len(d.stack):
			d.marks = d.marks[:len(d.marks)-1] // Python's POP also pops a bare mark
		case len(d.stack) > 0:
			d.stack = d.stack[:len(d.stack)-1]
		default:
			return d.errAt(off, op, ErrMalformed, "stack is empty")
		}
	case opPopMark:
		m, err := d.popMark(off, op)
		if err != nil {
			return err
		}
		d.stack = d.stack[:m]
	case opDup:
		if err := d.have(off, op, 1); err != nil {
			return err
		}
		d.pushGot(d.top())
	default:
		return d.stepBuild(off, op)
	}
	return nil
}

// stepBuild decodes the opcodes that build a tuple, list or dict of the
// values on the stack.
func (d *Decoder) stepBuild(off int, op byte) error {
	switch op {
	case opTuple1, opTuple2, opTuple3:
		n := int(op-opTuple1) + 1
		if err := d.have(off, op, n); err != nil {
			return err
		}
		items := append([]Value(nil), d.stack[len(d.stack)-n:]...)
		d.stack = d.stack[:len(d.stack)-n]
		d.appendItems(d.pushCont(KindTuple), items)
	case opTuple, opList:
		m, err := d.popMark(off, op)
		if err != nil {
			return err
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
			return err
		}
		items := append([]Value(nil), d.stack[m:]...)
		d.stack = d.stack[:m]
		d.pushCont(KindDict)
		if err := d.setItems(off, op, d.top(), items); err != nil {
			return err
		}
	}
	return nil
}

// stepControl decodes PROTO, FRAME and STOP.
func (d *Decoder) stepControl(off int, op byte) (done bool, err error) {
	switch op {
	case opProto:
		if p := d.data[d.pos]; p > 5 {
			return false, d.errAt(off, op, ErrMalformed, "protocol %d is not supported (0 to 5 are)", p)
		}
		d.pos++
	case opFrame:
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
			d.Progress(d.abs(d.pos), d.progressTotal(d.abs(d.pos)))
		}
		d.doc.root, d.doc.stop = d.stack[0], d.abs(off)
		return true, nil
	}
	return false, nil
}

// stepScalar decodes the opcodes that push a scalar: None, a bool, an
// int, a float or a string.
func (d *Decoder) stepScalar(off int, op byte) error {
	data := d.data
	switch op {
	case opNone:
		d.push(KindNone, 0)
	case opNewTrue:
		d.push(KindBool, 1)
	case opNewFalse:
		d.push(KindBool, 0)
	case opBinInt1:
		d.push(KindInt, uint64(data[d.pos]))
		d.pos++
	case opBinInt2:
		d.push(KindInt, uint64(binary.LittleEndian.Uint16(data[d.pos:])))
		d.pos += 2
	case opBinInt:
		d.push(KindInt, uint64(int64(int32(binary.LittleEndian.Uint32(data[d.pos:])))))
		d.pos += 4
	case opBinFloat:
		d.push(KindFloat, binary.BigEndian.Uint64(data[d.pos:]))
		d.pos += 8
	case opLong1, opLong4:
		return d.stepLong(off, op)
	case opShortBinUni, opShortBinBytes, opShortBinString, opBinUnicode, opBinBytes, opBinString,
		opBinUnicode8, opBinBytes8, opByteArray8:
		return d.stepCounted(off, op)
	case opInt, opLong, opFloat, opString, opUnicode:
		return d.stepText(off, op)
	default:
		// An opcode opTable calls data that no case decodes.
		return d.errAt(off, op, ErrMalformed, "not supported: a memory snapshot never holds it")
	}
	return nil
}

// stepLong decodes LONG1 and LONG4.
func (d *Decoder) stepLong(off int, op byte) error {
	data := d.data
	var n uint64
	if op == opLong1 {
		n = uint64(data[d.pos])
		d.pos++
	} else {
		n4 := int32(binary.LittleEndian.Uint32(data[d.pos:]))
		d.pos += 4
		if n4 < 0 {
			return d.errAt(off, op, ErrMalformed, "negative length")
		}
		n = uint64(n4)
	}
	if err := d.need(off, op, n); err != nil {
		return err
	}
	data = d.data // (need may have read more of an io.Reader's input)
	k, x, ok := decodeLong(data[d.pos : d.pos+int(n)])
	if !ok {
		return d.errAt(off, op, ErrMalformed, "integer of %d bytes does not fit in 64 bits", n)
	}
	d.pos += int(n)
	d.push(k, x)
	return nil
}

// stepCounted decodes the strings and bytes whose length precedes them.
func (d *Decoder) stepCounted(off int, op byte) error {
	data := d.data
	var n uint64
	switch opTable[op].arg {
	case argLen1:
		n = uint64(data[d.pos])
		d.pos++
	case argLen4:
		n = uint64(binary.LittleEndian.Uint32(data[d.pos:]))
		if op == opBinString && int32(n) < 0 {
			return d.errAt(off, op, ErrMalformed, "negative length")
		}
		d.pos += 4
	default:
		n = binary.LittleEndian.Uint64(data[d.pos:])
		d.pos += 8
	}
	if err := d.need(off, op, n); err != nil {
		return err
	}
	data = d.data // (need may have read more of an io.Reader's input)
	d.pushStr(data[d.pos : d.pos+int(n)])
	d.pos += int(n)
	return nil
}

// stepText decodes protocol 0's opcodes whose argument is a line of text.
func (d *Decoder) stepText(off int, op byte) error {
	s, err := d.line(off, op)
	if err != nil {
		return err
	}
	switch op {
	case opInt, opLong:
		if op == opInt && (s == "00" || s == "01") {
			d.push(KindBool, uint64(s[1]-'0'))
			return nil
		}
		if len(s) > 0 && s[len(s)-1] == 'L' {
			s = s[:len(s)-1]
		}
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			d.push(KindInt, uint64(i))
		} else if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			d.push(KindUint, u)
		} else {
			return d.errAt(off, op, ErrMalformed, "bad or too wide integer %q", s)
		}
	case opFloat:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return d.errAt(off, op, ErrMalformed, "bad float %q", s)
		}
		d.push(KindFloat, math.Float64bits(f))
	case opString:
		b, err := unquoteString(s)
		if err != nil {
			return d.errAt(off, op, ErrMalformed, "%v", err)
		}
		d.pushStr(b)
	case opUnicode:
		b, err := rawUnicodeEscape(s)
		if err != nil {
			return d.errAt(off, op, ErrMalformed, "%v", err)
		}
		d.pushStr(b)
	}
	return nil
}
