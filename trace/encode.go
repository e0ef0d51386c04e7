package trace

import "encoding/binary"

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
