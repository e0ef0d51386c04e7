package trace

import (
	"math"
	"strings"
)

// decodeError is an error found while decoding a chunk payload; the
// reader adds file, offset and chunk.
type decodeError struct {
	event int // index within the chunk, -1 for the chunk as a whole
	msg   string
}

func (e *decodeError) Error() string { return e.msg }

// eventDecoder decodes an events chunk a batch of events at a time, so
// that decoded events stay in cache until they are read.
type eventDecoder struct {
	kinds, tc, ac, sc, mc []byte
	j                     int // index of the next event of the chunk
	ti, ai, si, mi        int
	tu, au, su            uint64
	t, a                  uint64
	dev                   DeviceID
	stream                StreamID
	sp                    *[32]field
	nk                    Kind
	v2                    bool      // format version 2: size classes, repeats
	zigzagTime            bool      // the time column holds zigzag'd deltas
	regs                  [4]uint64 // version 2's address registers (numAddrRegs used)
	prevAddr, prevSize    uint64    // version 2: the previous event's
	rc                    []byte    // version 2's ring column
	ri                    int
	pos                   uint64              // version 2: allocations pushed to the ring
	ring                  [ringSize][2]uint64 // version 2: size and address of the latest allocations
	nStrings, nStacks     uint64
	errVal                uint64             // the value at fault, for error messages
	fs                    [decodeBlock]field // scratch: the fields of each event of a block
}

// start checks the column header of an events chunk payload p and makes
// the decoder ready to decode its events. nStrings and nStacks bound the
// string and stack IDs the events may use.
func (d *eventDecoder) start(p []byte, version int, nStrings, nStacks int) *decodeError {
	var hdr [10]uint64
	nh, _ := colHeaderLen(version)
	i := 0
	for j := range nh {
		hdr[j], i = uvarint(p, i)
		if i < 0 {
			return &decodeError{-1, "events chunk: bad varint in column header"}
		}
	}
	n, tu, au, su := hdr[0], hdr[1], hdr[2], hdr[3]
	timeMode := uint64(timeZigzag)
	lens := hdr[4:8] // T A S M
	if version >= 2 {
		timeMode, lens = hdr[4], hdr[5:10] // T A S M R
	}
	if n > maxChunkEvents {
		return &decodeError{-1, "events chunk: " + itoa(n) + " events, more than the limit " + itoa(maxChunkEvents)}
	}
	if tu == 0 || au == 0 || su == 0 || tu > math.MaxInt64 || au > math.MaxInt64 {
		return &decodeError{-1, "events chunk: bad delta unit"}
	}
	if timeMode != timeUnsigned && timeMode != timeZigzag {
		return &decodeError{-1, "events chunk: unknown time mode " + itoa(timeMode)}
	}
	rest := uint64(len(p) - i)
	var total uint64
	for _, l := range lens {
		if l > rest {
			return &decodeError{-1, "events chunk: column lengths exceed the chunk"}
		}
		total += l
	}
	if total+n != rest {
		return &decodeError{-1, "events chunk: column lengths " + itoa(total+n) + " do not match the payload's " + itoa(rest) + " bytes"}
	}
	*d = eventDecoder{tu: tu, au: au, su: su, sp: &spec[version], nk: numKindsIn[version],
		v2: version >= 2, zigzagTime: timeMode == timeZigzag,
		nStrings: uint64(nStrings), nStacks: uint64(nStacks)}
	d.kinds = p[i : i+int(n)]
	i += int(n)
	d.tc = p[i : i+int(lens[0])]
	i += int(lens[0])
	d.ac = p[i : i+int(lens[1])]
	i += int(lens[1])
	d.sc = p[i : i+int(lens[2])]
	i += int(lens[2])
	d.mc = p[i : i+int(lens[3])]
	i += int(lens[3])
	d.rc = p[i:]
	return nil
}

// remaining returns the number of events of the chunk not yet decoded.
func (d *eventDecoder) remaining() int { return len(d.kinds) - d.j }

// Decoding error codes; the hot loop only records one and its value.
const (
	errNone = iota
	errKind
	errDevice
	errDeviceRange
	errStream
	errMask
	errMaskBits
	errStack
	errStackID
	errTime
	errAddr
	errSize
	errAux
	errText
	errTextID
	errMarker
	errMarkerRange
	errRef
	errRefRange
)

var errMsgs = [...]string{
	errKind:        "unknown event kind ",
	errDevice:      "bad varint in device",
	errDeviceRange: "device out of range: zigzag ",
	errStream:      "bad varint in stream",
	errMask:        "bad varint in field mask",
	errMaskBits:    "bad field mask ",
	errStack:       "bad varint in stack",
	errStackID:     "undefined stack ",
	errTime:        "bad varint in time",
	errAddr:        "bad varint in address",
	errSize:        "bad varint in size",
	errAux:         "bad varint in aux",
	errText:        "bad varint in text",
	errTextID:      "undefined string ",
	errMarker:      "bad varint in marker",
	errMarkerRange: "marker kind out of range: ",
	errRef:         "bad varint in allocation reference",
	errRefRange:    "allocation reference beyond the chunk's latest allocations: ",
}

// next decodes up to len(dst) events into dst. After the chunk's last
// event it checks that the columns hold nothing more.
func (d *eventDecoder) next(dst []Event) (int, *decodeError) {
	// A block at a time, so that the block's events stay in the
	// first-level cache from one column's loop to the next.
	n := 0
	for n < len(dst) && d.j < len(d.kinds) {
		m, err := d.nextBlock(dst[n:min(len(dst), n+decodeBlock)])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// decodeBlock is the number of events nextBlock decodes column by column
// (15 KiB of events).
const decodeBlock = 256

// nextBlock is next for at most decodeBlock events.
func (d *eventDecoder) nextBlock(dst []Event) (int, *decodeError) {
	kinds := d.kinds[d.j:]
	if len(dst) > len(kinds) {
		dst = dst[:len(kinds)]
	}
	kinds = kinds[:len(dst)]
	dst = dst[:len(kinds)]
	// The columns are decoded one at a time, each in its own loop (with
	// few live values, they stay in registers): the kinds with the misc
	// column, then time, addresses and sizes. A loop stops at its
	// column's first bad value, and the next loops go no further: the
	// error reported is the one a decoder going event by event, field by
	// field (prefix, time, address, size, suffix; version 2 decodes
	// sizes before addresses), meets first.
	var ec decodeFault
	fs := d.fs[:len(kinds)]
	lim := d.kindsMisc(dst, kinds, fs, &ec)
	if d.zigzagTime {
		lim = d.timeZigzag(dst, lim, &ec)
	} else {
		lim = d.timeUnsigned(dst, lim, &ec)
	}
	if d.v2 {
		d.sizesAddrsV2(dst, fs, lim, &ec)
	} else {
		d.addrsSizesV1(dst, fs, lim, &ec)
	}
	if ec.code != errNone {
		n := ec.event
		d.j += n
		msg := errMsgs[ec.code]
		if strings.HasSuffix(msg, " ") {
			msg += itoa(d.errVal)
		}
		return n, &decodeError{d.j, msg}
	}
	n := len(kinds)
	d.j += n
	if d.j == len(d.kinds) && (d.ti != len(d.tc) || d.ai != len(d.ac) || d.si != len(d.sc) || d.mi != len(d.mc) || d.ri != len(d.rc)) {
		return n, &decodeError{-1, "events chunk: columns hold more data than its events use"}
	}
	return n, nil
}

// Each column loop below decodes a uvarint in three steps, all inlined:
// one byte, then up to four without a branch on the length
// (uvarintShort), then uvarint. No one function holding the three is
// within the inliner's budget, and a call slows every column loop.

// kindsMisc is nextBlock's loop over the kinds of dst's events, with the
// fields of the misc column (prefix and suffix); it sets each event's
// fields in fs and returns the limit for the other columns.
func (d *eventDecoder) kindsMisc(dst []Event, kinds []byte, fs []field, ec *decodeFault) int {
	lim := len(kinds)
	dst, fs = dst[:lim], fs[:lim] // (no bounds checks in the loop)
	sp := d.sp
	// The device, stream and kind count in locals: the stores to dst
	// would make the loop load them again event by event.
	nk, dev, stream := d.nk, d.dev, d.stream
	for n, tb := range kinds {
		k := Kind(tb & kindMask)
		if k-1 >= nk-1 { // k == KindInvalid wraps around
			d.errVal = uint64(k)
			ec.set(n, rankPrefix, errKind)
			lim = n
			break
		}
		f := sp[k]
		var stack StackID
		if tb&(flagDS|flagExtra|flagStack) != 0 {
			var errc int
			if f, stack, errc = d.prefix(tb, f); errc != errNone {
				ec.set(n, rankPrefix, errc)
				lim = n
				break
			}
			dev, stream = d.dev, d.stream
		}
		fs[n] = f
		// Field by field: a struct literal is built on the stack and
		// copied in wide moves that stall on store forwarding.
		e := &dst[n]
		e.Kind, e.Marker, e.Device, e.Stream = k, 0, dev, stream
		e.Aux, e.Text, e.Stack = 0, 0, stack
		if f&(fieldAux|fieldText|fieldMarker) != 0 {
			if errc := d.suffix(f, e); errc != errNone {
				ec.set(n, rankSuffix, errc)
				lim = n + 1 // the event's other columns come first
				break
			}
		}
	}
	return lim
}

// timeZigzag is nextBlock's time loop for a time column of zigzag'd
// deltas; it returns the new limit.
func (d *eventDecoder) timeZigzag(dst []Event, lim int, ec *decodeFault) int {
	tc, ti, t, tu := d.tc, d.ti, d.t, int64(d.tu)
	dl := dst[:lim]
	for n := range dl {
		var v uint64
		var k int
		if uint(ti) < uint(len(tc)) && tc[ti] < 0x80 {
			v, ti = uint64(tc[ti]), ti+1
		} else if v, k = uvarintShort(tc, ti); k >= 0 {
			ti = k
		} else if v, ti = uvarint(tc, ti); ti < 0 {
			ec.set(n, rankTime, errTime)
			lim = n
			break
		}
		t += uint64(unzigzag(v) * tu)
		dl[n].TimeNS = int64(t)
	}
	d.ti, d.t = ti, t
	return lim
}

// addrsSizesV1 is nextBlock's address loop, then size loop, for version 1:
// an address is a delta from the previous one.
func (d *eventDecoder) addrsSizesV1(dst []Event, fs []field, lim int, ec *decodeFault) {
	// address
	ac, ai, a, au := d.ac, d.ai, d.a, int64(d.au)
	dl := dst[:lim]
	for n, f := range fs[:len(dl)] {
		if f&fieldAddr == 0 {
			dl[n].Addr = 0
			continue
		}
		var v uint64
		var k int
		if uint(ai) < uint(len(ac)) && ac[ai] < 0x80 {
			v, ai = uint64(ac[ai]), ai+1
		} else if v, k = uvarintShort(ac, ai); k >= 0 {
			ai = k
		} else if v, ai = uvarint(ac, ai); ai < 0 {
			ec.set(n, rankAddr, errAddr)
			lim = n
			break
		}
		a += uint64(unzigzag(v) * au)
		dl[n].Addr = a
	}
	d.ai, d.a = ai, a
	// size
	sc, si, su := d.sc, d.si, d.su
	dl = dst[:lim]
	for n, f := range fs[:len(dl)] {
		if f&fieldSize == 0 {
			dl[n].SizeBytes = 0
			continue
		}
		var v uint64
		var k int
		if uint(si) < uint(len(sc)) && sc[si] < 0x80 {
			v, si = uint64(sc[si]), si+1
		} else if v, k = uvarintShort(sc, si); k >= 0 {
			si = k
		} else if v, si = uvarint(sc, si); si < 0 {
			ec.set(n, rankSize, errSize)
			break
		}
		dl[n].SizeBytes = v * su
	}
	d.si = si
}

// Ranks of an event's fields in decoding order, for decodeFault.
const (
	rankPrefix = iota
	rankTime
	rankAddr
	rankSize
	rankSuffix

	// Version 2 decodes an event's size before its address.
	rankSizeV2 = rankAddr
	rankAddrV2 = rankSize
)

// timeUnsigned is nextBlock's time loop for a time column of uvarint
// deltas (version 2's timeUnsigned mode); it returns the new limit.
func (d *eventDecoder) timeUnsigned(dst []Event, lim int, ec *decodeFault) int {
	tc, ti, t, tu := d.tc, d.ti, d.t, d.tu
	dl := dst[:lim]
	for n := range dl {
		var v uint64
		var k int
		if uint(ti) < uint(len(tc)) && tc[ti] < 0x80 {
			v, ti = uint64(tc[ti]), ti+1
		} else if v, k = uvarintShort(tc, ti); k >= 0 {
			ti = k
		} else if v, ti = uvarint(tc, ti); ti < 0 {
			ec.set(n, rankTime, errTime)
			lim = n
			break
		}
		t += v * tu
		dl[n].TimeNS = int64(t)
	}
	d.ti, d.t = ti, t
	return lim
}

// sizesAddrsV2 is nextBlock's size and address loop for version 2, an
// event's size before its address: an address is a delta from its size
// class's register; an event of a fieldRepeat kind that encodes no size or
// address has the previous event's; one of a fieldRef kind has those of a
// ring entry; a fieldPush event joins the ring.
func (d *eventDecoder) sizesAddrsV2(dst []Event, fs []field, lim int, ec *decodeFault) {
	sc, si, su := d.sc, d.si, d.su
	ac, ai, au := d.ac, d.ai, int64(d.au)
	rc, ri := d.rc, d.ri
	ps, pa, pos := d.prevSize, d.prevAddr, d.pos
	regs := d.regs
	ring := &d.ring
	dl := dst[:lim]
	for n, f := range fs[:len(dl)] {
		if f&(fieldRef|fieldAddr|fieldSize) == fieldRef {
			var j uint64
			if uint(ri) < uint(len(rc)) && rc[ri] < 0x80 {
				j = uint64(rc[ri])
				ri++
			} else if j, ri = uvarint(rc, ri); ri < 0 {
				ec.set(n, rankSizeV2, errRef)
				break
			}
			if j >= min(pos, ringSize-1) {
				d.errVal = j
				ec.set(n, rankSizeV2, errRefRange)
				break
			}
			ent := &ring[(pos-1-j)%ringSize]
			ps, pa = ent[0], ent[1]
		} else {
			if f&fieldSize == 0 {
				ps &= -uint64(f & fieldRepeat >> 5) // kept by a repeat, else zero
			} else {
				var v uint64
				var k int
				if uint(si) < uint(len(sc)) && sc[si] < 0x80 {
					v, si = uint64(sc[si]), si+1
				} else if v, k = uvarintShort(sc, si); k >= 0 {
					si = k
				} else if v, si = uvarint(sc, si); si < 0 {
					ec.set(n, rankSizeV2, errSize)
					break
				}
				ps = v * su
			}
			if f&fieldAddr == 0 {
				pa &= -uint64(f & fieldRepeat >> 5)
			} else {
				var v uint64
				var k int
				if uint(ai) < uint(len(ac)) && ac[ai] < 0x80 {
					v, ai = uint64(ac[ai]), ai+1
				} else if v, k = uvarintShort(ac, ai); k >= 0 {
					ai = k
				} else if v, ai = uvarint(ac, ai); ai < 0 {
					ec.set(n, rankAddrV2, errAddr)
					break
				}
				r := sizeClass(ps) & (len(regs) - 1)
				pa = regs[r] + uint64(unzigzag(v)*au)
				regs[r] = pa
			}
		}
		dl[n].SizeBytes, dl[n].Addr = ps, pa
		// Every event writes the ring's next entry, which only a push
		// keeps (the entry ringSize back is out of reach).
		ring[pos%ringSize] = [2]uint64{ps, pa}
		pos += uint64(f >> 6 & 1) // fieldPush
	}
	d.si, d.ai, d.ri = si, ai, ri
	d.prevSize, d.prevAddr, d.pos, d.regs = ps, pa, pos, regs
}

// decodeFault is the first bad field met, in event and field order.
type decodeFault struct {
	event, rank, code int
}

// set records a bad field unless one met earlier is recorded.
func (f *decodeFault) set(event, rank, code int) {
	if f.code == errNone || event < f.event || (event == f.event && rank < f.rank) {
		*f = decodeFault{event, rank, code}
	}
}

// prefix decodes an event's leading misc-column fields: device and
// stream, extra field mask, stack.
func (d *eventDecoder) prefix(tb byte, f field) (field, StackID, int) {
	var v uint64
	mc, mi := d.mc, d.mi
	defer func() { d.mi = mi }()
	if tb&flagDS != 0 {
		if v, mi = uvarint(mc, mi); mi < 0 {
			return f, 0, errDevice
		}
		dv := unzigzag(v)
		if dv != int64(int32(dv)) {
			d.errVal = v
			return f, 0, errDeviceRange
		}
		d.dev = DeviceID(dv)
		if v, mi = uvarint(mc, mi); mi < 0 {
			return f, 0, errStream
		}
		d.stream = StreamID(v)
	}
	if tb&flagExtra != 0 {
		if v, mi = uvarint(mc, mi); mi < 0 {
			return f, 0, errMask
		}
		if v&^uint64(allFields) != 0 || v == 0 {
			d.errVal = v
			return f, 0, errMaskBits
		}
		f |= field(v)
	}
	var stack StackID
	if tb&flagStack != 0 {
		if v, mi = uvarint(mc, mi); mi < 0 {
			return f, 0, errStack
		}
		if v == 0 || v >= d.nStacks {
			d.errVal = v
			return f, 0, errStackID
		}
		stack = StackID(v)
	}
	return f, stack, errNone
}

// suffix decodes an event's trailing misc-column fields into e: aux,
// text, marker.
func (d *eventDecoder) suffix(f field, e *Event) int {
	var v uint64
	mc, mi := d.mc, d.mi
	defer func() { d.mi = mi }()
	if f&fieldAux != 0 {
		if e.Aux, mi = uvarint(mc, mi); mi < 0 {
			return errAux
		}
	}
	if f&fieldText != 0 {
		if v, mi = uvarint(mc, mi); mi < 0 {
			return errText
		}
		if v >= d.nStrings {
			d.errVal = v
			return errTextID
		}
		e.Text = StringID(v)
	}
	if f&fieldMarker != 0 {
		if v, mi = uvarint(mc, mi); mi < 0 {
			return errMarker
		}
		if v > math.MaxUint8 {
			d.errVal = v
			return errMarkerRange
		}
		e.Marker = MarkerKind(v)
	}
	return errNone
}
