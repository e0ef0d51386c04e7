package trace

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/bits"
	"strings"
)

// The raw codec: varints, chunk framing and the column layout of event
// chunks. It knows the wire format and nothing of files or validation
// beyond what decoding needs.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// uvarint decodes the uvarint at b[i:] and returns it with the index past
// it; the index is negative when b holds no valid uvarint at i.
func uvarint(b []byte, i int) (uint64, int) {
	if i < 0 || i+binary.MaxVarintLen64 > len(b) {
		return uvarintTail(b, i)
	}
	b = b[i : i+binary.MaxVarintLen64]
	c := uint64(b[0])
	if c < 0x80 {
		return c, i + 1
	}
	v := c & 0x7f
	c = uint64(b[1])
	if c < 0x80 {
		return v | c<<7, i + 2
	}
	v |= (c & 0x7f) << 7
	c = uint64(b[2])
	if c < 0x80 {
		return v | c<<14, i + 3
	}
	v |= (c & 0x7f) << 14
	c = uint64(b[3])
	if c < 0x80 {
		return v | c<<21, i + 4
	}
	v |= (c & 0x7f) << 21
	c = uint64(b[4])
	if c < 0x80 {
		return v | c<<28, i + 5
	}
	v |= (c & 0x7f) << 28
	c = uint64(b[5])
	if c < 0x80 {
		return v | c<<35, i + 6
	}
	v |= (c & 0x7f) << 35
	c = uint64(b[6])
	if c < 0x80 {
		return v | c<<42, i + 7
	}
	v |= (c & 0x7f) << 42
	c = uint64(b[7])
	if c < 0x80 {
		return v | c<<49, i + 8
	}
	v |= (c & 0x7f) << 49
	c = uint64(b[8])
	if c < 0x80 {
		return v | c<<56, i + 9
	}
	v |= (c & 0x7f) << 56
	c = uint64(b[9])
	if c > 1 {
		return 0, -1
	}
	return v | c<<63, i + 10
}

// uvarint4 decodes the uvarint of at most four bytes at the start of x, read
// little-endian, without a branch; one of x's four high bits must be clear.
// It returns the value and the uvarint's length.
func uvarint4(x uint32) (uint64, int) {
	l := bits.TrailingZeros32(^x&0x80808080) + 1 // 8 times the length
	y := uint64(x) & (1<<l - 1)
	return y&0x7f | y>>1&0x3f80 | y>>2&0x1fc000 | y>>3&0xfe00000, l >> 3
}

// uvarintTail decodes a uvarint near the end of b.
func uvarintTail(b []byte, i int) (uint64, int) {
	if i < 0 {
		return 0, -1
	}
	var v uint64
	for s := uint(0); s < 64; s += 7 {
		if i >= len(b) {
			return 0, -1
		}
		c := b[i]
		i++
		if c < 0x80 {
			if s == 63 && c > 1 {
				return 0, -1
			}
			return v | uint64(c)<<s, i
		}
		v |= uint64(c&0x7f) << s
	}
	return 0, -1
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func absDelta(d int64) uint64 {
	if d < 0 {
		return uint64(-d) // -MinInt64 wraps to MinInt64, whose uint64 is its magnitude
	}
	return uint64(d)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// gcdStep is gcd(g, x), for a running gcd g: most values are multiples of
// it, which one test tells (a mask when g is a power of two: addresses
// and many sizes), where gcd divides twice.
func gcdStep(g, x uint64) uint64 {
	if g&(g-1) == 0 {
		if x&(g-1) == 0 {
			return g
		}
	} else if x%g == 0 {
		return g
	}
	return gcd(g, x)
}

// unitOf turns a gcd into a usable unit: 1 when nothing divides, and at
// most MaxInt64 so that signed division stays exact.
func unitOf(g uint64) uint64 {
	if g == 0 || g > math.MaxInt64 {
		return 1
	}
	return g
}

// eventEncoder encodes event chunks; its buffers are reused chunk to chunk.
type eventEncoder struct {
	timeCol, addrCol, sizeCol, miscCol, ringCol, kinds []byte
	m                                                  chunkModel
	// The chunk in progress (begin, add, finish).
	version    int
	units      chunkUnits // version 2's, gathered by add
	tu, au, su uint64     // the units add divides by
	zigzagTime bool
	pt         uint64 // the last event's time
	prev       Event  // the last event
	dev        DeviceID
	stream     StreamID
	batch      []Event // parallel.encodeRange's events in memory
}

// chunkModel follows, for a writer, the delta state of a chunk's
// addresses: the size classes' registers and version 2's allocation ring,
// with an index to find a block in it.
type chunkModel struct {
	v2    bool
	regs  [numAddrRegs]uint64 // version 1 uses regs[0] alone
	pos   uint64              // allocations pushed
	ring  [ringSize]struct{ addr, size uint64 }
	index [ringIndexSize]uint32 // push position + 1 of an address's latest allocation, by hash
}

// ringIndexSize is the number of slots of chunkModel's index: 16 for each
// allocation the ring holds, so that few are lost to a later one of the
// same slot.
const ringIndexSize = 16 * ringSize

// ringSlot returns the index slot of addr (mixed first: block addresses
// are regular, and a plain multiplicative hash maps strides of them to
// few slots).
func ringSlot(addr uint64) uint32 {
	h := addr >> 9
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	return uint32(h>>32) % ringIndexSize
}

// reset readies m for a chunk of format version version.
func (m *chunkModel) reset(version int) {
	m.v2, m.regs, m.pos = version >= 2, [numAddrRegs]uint64{}, 0
	if version >= 2 {
		clear(m.index[:])
	}
}

// code returns the fields e encodes after prev (the chunk's previous
// event, or a zero Event) in the spec sp, their extra mask, the ring
// reference when e refers to the ring (its fields then lack addr and
// size), and its address's delta from its register when it encodes one;
// it moves the state past e.
func (m *chunkModel) code(sp *[32]field, e, prev *Event) (f, extra field, ref uint64, delta int64) {
	f = sp[e.Kind]
	need := fieldsOf(e)
	if f&(fieldRepeat|fieldRef) != 0 {
		need &^= fieldAddr | fieldSize
		switch {
		case f&fieldRepeat != 0 && e.Addr == prev.Addr && e.SizeBytes == prev.SizeBytes:
		case f&fieldRef != 0 && m.find(e, &ref):
		default:
			need |= fieldAddr | fieldSize
		}
	}
	extra = need &^ f
	f |= extra
	if f&fieldAddr != 0 {
		r := 0
		if m.v2 {
			r = sizeClass(e.SizeBytes)
		}
		delta = int64(e.Addr - m.regs[r])
		m.regs[r] = e.Addr
	}
	if f&fieldPush != 0 {
		m.ring[m.pos%ringSize] = struct{ addr, size uint64 }{e.Addr, e.SizeBytes}
		m.index[ringSlot(e.Addr)] = uint32(m.pos + 1)
		m.pos++
	}
	return f, extra, ref, delta
}

// find sets *ref to the reference of e's address and size in the ring,
// if they are there.
func (m *chunkModel) find(e *Event, ref *uint64) bool {
	p := uint64(m.index[ringSlot(e.Addr)])
	if p == 0 || m.pos-(p-1) >= ringSize {
		return false
	}
	p--
	if ent := m.ring[p%ringSize]; ent.addr != e.Addr || ent.size != e.SizeBytes {
		return false
	}
	*ref = m.pos - 1 - p
	return true
}

// encode appends the payload of an events chunk holding evs, in format
// version version, to dst.
//
// Layout (all integers uvarints; timeMode and the ring column from
// version 2 on):
//
//	n timeUnit addrUnit sizeUnit [timeMode] len(time) len(addr) len(size) len(misc) [len(ring)]
//	kinds[n] time addr size misc [ring]
//
// Delta state (time, addresses, ring, device, stream) starts at zero in
// every chunk.
func (c *eventEncoder) encode(dst []byte, evs []Event, version int) []byte {
	if version >= 2 {
		c.begin(version, nil)
	} else {
		var u chunkUnits
		c.scanV1(&u, evs)
		c.begin(version, &u)
	}
	c.add(evs)
	return c.finish(dst, len(evs))
}

// chunkUnits are what divides a chunk's values (the gcds that make its
// units) and whether a time goes back.
type chunkUnits struct {
	tg, ag, sg uint64 // gcds of the time deltas, addresses (version 1: address deltas) and sizes
	pt         uint64 // the time before the next event
	back       bool   // a time delta is negative
}

// scanV1 gathers the units of evs, a chunk in format version 1, whose
// address unit divides the address deltas: the first of its two passes.
func (c *eventEncoder) scanV1(u *chunkUnits, evs []Event) {
	sp := &spec[1]
	prev := &Event{}
	c.m.reset(1)
	for i := range evs {
		e := &evs[i]
		d := int64(uint64(e.TimeNS) - u.pt)
		if u.tg != 1 {
			u.tg = gcd(u.tg, absDelta(d))
		}
		u.pt = uint64(e.TimeNS)
		f, _, _, delta := c.m.code(sp, e, prev)
		prev = e
		if f&fieldAddr != 0 && u.ag != 1 {
			u.ag = gcd(u.ag, absDelta(delta))
		}
		if f&fieldSize != 0 && u.sg != 1 {
			u.sg = gcd(u.sg, e.SizeBytes)
		}
	}
}

// begin readies c for a chunk of format version version: add then takes
// its events, in order (in batches, if need be), and finish writes it.
// Version 1's units u are known first (scanV1). Version 2's (u nil) are
// gathered as add goes: its times, addresses and sizes are encoded in
// units of 1 and zigzag times, and finish divides them by the units,
// which divide them exactly, so that a chunk's events need be given only
// once, and not all at once (see parallel.encodeRange).
//
// The units divide every value encoded: in version 1, the address
// deltas; in version 2, for speed, the addresses and sizes of every
// event (the registers, the ring and the repeats hold only values of
// events before, so that their deltas are multiples too).
func (c *eventEncoder) begin(version int, u *chunkUnits) {
	c.version = version
	c.units = chunkUnits{}
	c.tu, c.au, c.su, c.zigzagTime = 1, 1, 1, true
	if u != nil {
		c.tu, c.au, c.su = unitOf(u.tg), unitOf(u.ag), unitOf(u.sg)
	}
	c.pt, c.prev, c.dev, c.stream = 0, Event{}, 0, 0
	c.kinds, c.timeCol, c.addrCol, c.sizeCol, c.miscCol, c.ringCol = c.kinds[:0], c.timeCol[:0], c.addrCol[:0], c.sizeCol[:0], c.miscCol[:0], c.ringCol[:0]
	c.m.reset(version)
}

// reserve gives the columns room for a chunk of n events: about what
// version 2's values take in units of 1 (see begin), where appending
// grew them by doubling, copying what they held. Room never written is
// never touched.
func (c *eventEncoder) reserve(n int) {
	room := func(col []byte, per int) []byte {
		if cap(col) < per*n {
			return make([]byte, 0, per*n)
		}
		return col
	}
	c.kinds, c.timeCol, c.addrCol, c.sizeCol = room(c.kinds, 1), room(c.timeCol, 5), room(c.addrCol, 5), room(c.sizeCol, 4)
	c.miscCol, c.ringCol = room(c.miscCol, 2), room(c.ringCol, 2)
}

// add encodes evs, the chunk's next events, into the columns.
func (c *eventEncoder) add(evs []Event) {
	if len(evs) == 0 {
		return
	}
	sp := &spec[c.version]
	m := &c.m
	gather := c.version >= 2
	tg, ag, sg, back := c.units.tg, c.units.ag, c.units.sg, c.units.back
	tu, au, su, zz := int64(c.tu), int64(c.au), c.su, c.zigzagTime
	kinds, tc, ac, sc, mc, rc := c.kinds, c.timeCol, c.addrCol, c.sizeCol, c.miscCol, c.ringCol
	pt, prev, dev, stream := c.pt, &c.prev, c.dev, c.stream
	for i := range evs {
		e := &evs[i]
		dt := int64(uint64(e.TimeNS) - pt)
		if gather {
			if tg != 1 {
				tg = gcdStep(tg, absDelta(dt))
			}
			back = back || dt < 0
			if ag != 1 {
				ag = gcdStep(ag, e.Addr)
			}
			if sg != 1 {
				sg = gcdStep(sg, e.SizeBytes)
			}
		}
		f, extra, ref, delta := m.code(sp, e, prev)
		prev = e
		tb := byte(e.Kind)
		if e.Device != dev || e.Stream != stream {
			tb |= flagDS
			dev, stream = e.Device, e.Stream
			mc = binary.AppendUvarint(mc, zigzag(int64(dev)))
			mc = binary.AppendUvarint(mc, uint64(stream))
		}
		if extra != 0 {
			tb |= flagExtra
			mc = binary.AppendUvarint(mc, uint64(extra))
		}
		if e.Stack != NoStack {
			tb |= flagStack
			mc = binary.AppendUvarint(mc, uint64(e.Stack))
		}
		kinds = append(kinds, tb)
		d := dt
		if tu != 1 { // version 1's: version 2's are 1 here (see begin)
			d /= tu
		}
		if zz {
			tc = binary.AppendUvarint(tc, zigzag(d))
		} else {
			tc = binary.AppendUvarint(tc, uint64(d))
		}
		pt = uint64(e.TimeNS)
		if f&(fieldRef|fieldAddr|fieldSize) == fieldRef {
			rc = binary.AppendUvarint(rc, ref)
		}
		if f&fieldAddr != 0 {
			if au != 1 {
				delta /= au
			}
			ac = binary.AppendUvarint(ac, zigzag(delta))
		}
		if f&fieldSize != 0 {
			sz := e.SizeBytes
			if su != 1 {
				sz /= su
			}
			sc = binary.AppendUvarint(sc, sz)
		}
		if f&fieldAux != 0 {
			mc = binary.AppendUvarint(mc, e.Aux)
		}
		if f&fieldText != 0 {
			mc = binary.AppendUvarint(mc, uint64(e.Text))
		}
		if f&fieldMarker != 0 {
			mc = binary.AppendUvarint(mc, uint64(e.Marker))
		}
	}
	c.kinds, c.timeCol, c.addrCol, c.sizeCol, c.miscCol, c.ringCol = kinds, tc, ac, sc, mc, rc
	c.units.tg, c.units.ag, c.units.sg, c.units.back = tg, ag, sg, back
	// The last event is kept by value: a batch's buffer is refilled.
	c.pt, c.prev, c.dev, c.stream = pt, *prev, dev, stream
}

// finish appends the payload of the chunk of n events given to add since
// begin to dst.
func (c *eventEncoder) finish(dst []byte, n int) []byte {
	v2 := c.version >= 2
	if v2 {
		// The values were encoded in units of 1 (see begin).
		c.tu, c.au, c.su = unitOf(c.units.tg), unitOf(c.units.ag), unitOf(c.units.sg)
		c.zigzagTime = c.units.back
		c.timeCol = rescale(c.timeCol, c.tu, true, c.zigzagTime)
		c.addrCol = rescale(c.addrCol, c.au, true, true)
		c.sizeCol = rescale(c.sizeCol, c.su, false, false)
	}
	tc, ac, sc, mc, rc := c.timeCol, c.addrCol, c.sizeCol, c.miscCol, c.ringCol
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = binary.AppendUvarint(dst, c.tu)
	dst = binary.AppendUvarint(dst, c.au)
	dst = binary.AppendUvarint(dst, c.su)
	if v2 {
		timeMode := uint64(timeUnsigned)
		if c.zigzagTime {
			timeMode = timeZigzag
		}
		dst = binary.AppendUvarint(dst, timeMode)
	}
	for _, l := range [...]int{len(tc), len(ac), len(sc), len(mc)} {
		dst = binary.AppendUvarint(dst, uint64(l))
	}
	if v2 {
		dst = binary.AppendUvarint(dst, uint64(len(rc)))
	}
	dst = append(dst, c.kinds...)
	dst = append(dst, tc...)
	dst = append(dst, ac...)
	dst = append(dst, sc...)
	dst = append(dst, mc...)
	return append(dst, rc...)
}

// rescale rewrites in place col's uvarints, each a value that unit
// divides exactly (zigzagged when in), as the value divided by unit
// (zigzagged when out). A value is never longer after: a quotient is no
// larger, and out is only false when in is for a value never negative
// (a time delta of a chunk whose times never go back).
func rescale(col []byte, unit uint64, in, out bool) []byte {
	if unit == 1 && in == out {
		return col
	}
	w := 0
	for r := 0; r < len(col); {
		var u uint64
		u, r = uvarint(col, r) // valid: add wrote them
		if in {
			v := unzigzag(u) / int64(unit)
			if out {
				u = zigzag(v)
			} else {
				u = uint64(v)
			}
		} else {
			u /= unit
		}
		w = len(binary.AppendUvarint(col[:w], u))
	}
	return col[:w]
}

// eventBound bounds the bytes e adds to an events chunk after prev (the
// chunk's previous event, or a zero Event), for the writer's flush
// threshold; maxAddr is the largest address of the chunk's events so far
// (zero at its start), which it updates. It knows nothing of the version's
// delta state: an address's delta, from a register holding an earlier
// address, is no larger than the largest address; a ring reference (below
// 2^14) takes no more than the address and size it replaces.
func eventBound(e, prev *Event, maxAddr *uint64) int {
	n, hasAddr := baseBound(e, prev)
	if hasAddr {
		*maxAddr = max(*maxAddr, e.Addr)
		n += addrBound(*maxAddr)
	}
	return n
}

// maxEventBound is the most eventBound gives: baseBound's type byte and
// free mask, time, size, device and stream, and the rest of the fields,
// and an address.
const maxEventBound = 2 + binary.MaxVarintLen64 + binary.MaxVarintLen64 + 2*binary.MaxVarintLen64 +
	4*binary.MaxVarintLen64 + 1 + binary.MaxVarintLen64

// addrBound is eventBound's term for an address when the chunk's largest
// address so far is maxAddr.
func addrBound(maxAddr uint64) int {
	if maxAddr >= 1<<62 {
		return binary.MaxVarintLen64
	}
	return uvarintLen(maxAddr<<1 | 1)
}

// baseBound is eventBound but for the address's term, and whether e has
// an address.
func baseBound(e, prev *Event) (int, bool) {
	// The type byte, the extra mask of a free (repeats and references
	// spared), the time delta (a uvarint delta is no longer than its
	// zigzag, nor a delta in a unit longer than the delta).
	n := 2 + uvarintLen(zigzag(int64(uint64(e.TimeNS)-uint64(prev.TimeNS))))
	f := kindFields[e.Kind&kindMask] | fieldsOf(e)
	if f&fieldSize != 0 {
		n += uvarintLen(e.SizeBytes)
	}
	if e.Device != prev.Device || e.Stream != prev.Stream {
		n += 2 * binary.MaxVarintLen64
	}
	if e.Aux|uint64(e.Text)|uint64(e.Marker)|uint64(e.Stack) != 0 || f&^kindFields[e.Kind&kindMask] != 0 {
		n += 4*binary.MaxVarintLen64 + 1
	}
	return n, f&fieldAddr != 0
}

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
	// few live values, they stay in registers). A loop stops at its
	// column's first bad value, and the next loops go no further: the
	// error reported is the one a decoder going event by event, field by
	// field (prefix, time, address, size, suffix; version 2 decodes
	// sizes before addresses), meets first.
	lim := len(kinds)
	var ec decodeFault
	fs := d.fs[:len(kinds)]
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
	// time
	if !d.zigzagTime {
		lim = d.timeUnsigned(dst, lim, &ec)
	} else {
		tc, ti, t, tu := d.tc, d.ti, d.t, int64(d.tu)
		dl := dst[:lim]
		for n := range dl {
			var v uint64
			if uint(ti) < uint(len(tc)) && tc[ti] < 0x80 {
				v = uint64(tc[ti])
				ti++
			} else if ti >= 0 && ti <= len(tc)-4 && ^binary.LittleEndian.Uint32(tc[ti:])&0x80808080 != 0 {
				var k int
				v, k = uvarint4(binary.LittleEndian.Uint32(tc[ti:]))
				ti += k
			} else if v, ti = uvarint(tc, ti); ti < 0 {
				ec.set(n, rankTime, errTime)
				lim = n
				break
			}
			t += uint64(unzigzag(v) * tu)
			dl[n].TimeNS = int64(t)
		}
		d.ti, d.t = ti, t
	}
	if d.v2 {
		lim = d.sizesAddrsV2(dst, fs, lim, &ec)
	} else {
		// address
		ac, ai, a, au := d.ac, d.ai, d.a, int64(d.au)
		dl := dst[:lim]
		for n, f := range fs[:len(dl)] {
			if f&fieldAddr == 0 {
				dl[n].Addr = 0
				continue
			}
			var v uint64
			if uint(ai) < uint(len(ac)) && ac[ai] < 0x80 {
				v = uint64(ac[ai])
				ai++
			} else if ai >= 0 && ai <= len(ac)-4 && ^binary.LittleEndian.Uint32(ac[ai:])&0x80808080 != 0 {
				var k int
				v, k = uvarint4(binary.LittleEndian.Uint32(ac[ai:]))
				ai += k
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
			if uint(si) < uint(len(sc)) && sc[si] < 0x80 {
				v = uint64(sc[si])
				si++
			} else if si >= 0 && si <= len(sc)-4 && ^binary.LittleEndian.Uint32(sc[si:])&0x80808080 != 0 {
				var k int
				v, k = uvarint4(binary.LittleEndian.Uint32(sc[si:]))
				si += k
			} else if v, si = uvarint(sc, si); si < 0 {
				ec.set(n, rankSize, errSize)
				lim = n
				break
			}
			dl[n].SizeBytes = v * su
		}
		d.si = si
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
		if uint(ti) < uint(len(tc)) && tc[ti] < 0x80 {
			v = uint64(tc[ti])
			ti++
		} else if ti >= 0 && ti <= len(tc)-4 && ^binary.LittleEndian.Uint32(tc[ti:])&0x80808080 != 0 {
			var k int
			v, k = uvarint4(binary.LittleEndian.Uint32(tc[ti:]))
			ti += k
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
// ring entry; a fieldPush event joins the ring. It returns the new limit.
func (d *eventDecoder) sizesAddrsV2(dst []Event, fs []field, lim int, ec *decodeFault) int {
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
				lim = n
				break
			}
			if j >= min(pos, ringSize-1) {
				d.errVal = j
				ec.set(n, rankSizeV2, errRefRange)
				lim = n
				break
			}
			ent := &ring[(pos-1-j)%ringSize]
			ps, pa = ent[0], ent[1]
		} else {
			if f&fieldSize == 0 {
				ps &= -uint64(f & fieldRepeat >> 5) // kept by a repeat, else zero
			} else {
				var v uint64
				if uint(si) < uint(len(sc)) && sc[si] < 0x80 {
					v = uint64(sc[si])
					si++
				} else if si >= 0 && si <= len(sc)-4 && ^binary.LittleEndian.Uint32(sc[si:])&0x80808080 != 0 {
					var k int
					v, k = uvarint4(binary.LittleEndian.Uint32(sc[si:]))
					si += k
				} else if v, si = uvarint(sc, si); si < 0 {
					ec.set(n, rankSizeV2, errSize)
					lim = n
					break
				}
				ps = v * su
			}
			if f&fieldAddr == 0 {
				pa &= -uint64(f & fieldRepeat >> 5)
			} else {
				var v uint64
				if uint(ai) < uint(len(ac)) && ac[ai] < 0x80 {
					v = uint64(ac[ai])
					ai++
				} else if ai >= 0 && ai <= len(ac)-4 && ^binary.LittleEndian.Uint32(ac[ai:])&0x80808080 != 0 {
					var k int
					v, k = uvarint4(binary.LittleEndian.Uint32(ac[ai:]))
					ai += k
				} else if v, ai = uvarint(ac, ai); ai < 0 {
					ec.set(n, rankAddrV2, errAddr)
					lim = n
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
	return lim
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

// decodeTable appends the definitions of a table chunk to strings and
// stacks; each must define the next ID in order.
func decodeTable(p []byte, strings []string, stacks [][]Frame) ([]string, [][]Frame, *decodeError) {
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

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
