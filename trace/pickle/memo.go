package pickle

import "math/bits"

// The memo of a large pickle is mostly the entries of a memory snapshot's
// trace: each entry dict and its "N/A" string are memoized, so the memo
// grows by two Values an entry (800 MB for a hundred million entries)
// although nothing refers to them again. DecodeDoc therefore keeps only the
// memo's latest entries in Decoder.memo (from index memoBase on) and moves
// older ones, every consumedEvery bytes once there are memoCompactAt of
// them, into blocks of 2^memoBlockShift that take a few words when their
// values follow a short periodic pattern (entry n, string, entry n+1,
// string...), in about a quarter of their size when they are entries in
// order, one other value again and again and tickets (a snapshot with
// stacks: entry, ticket, string, entry, string...), and their values
// otherwise. Lookups below memoBase cost a
// block's arithmetic; the memo holds the same values either way. (Tests
// make the blocks, the threshold and the interval small: Decoder.memoShift,
// compactAt and checkEvery.)
const (
	memoBlockShift = 12
	memoCompactAt  = 1 << 18
)

// memoBlock holds a block of memo entries: raw; or, when cls is set,
// classed: two bits a value say whether it is the next of the entries in
// order from base[0] (0), base[1] (1), the ticket of the next id of small
// (2) or the next value of other (3); or else value j is
// base[p] + step[p]·(j >> shift) with p = j mod 2^shift.
type memoBlock struct {
	raw   []Value
	shift uint8
	base  [4]Value
	step  [4]Value
	cls   []uint64
	pre   [][3]uint16 // per word of cls: the values of classes 0, 2 and 3 before it
	small []uint16
	other []Value
}

// compress returns vs (a block's values) as a patterned block when they
// follow a pattern of period 1, 2 or 4 (at most half their length), else
// classed or raw.
func compress(vs []Value) memoBlock {
	for shift := uint8(0); shift <= 2 && 2<<shift <= len(vs); shift++ {
		p := 1 << shift
		var b memoBlock
		b.shift = shift
		for ph := range p {
			b.base[ph] = vs[ph]
			b.step[ph] = vs[ph+p] - vs[ph]
		}
		ok := true
		for j, v := range vs {
			ph := j & (p - 1)
			if v != b.base[ph]+b.step[ph]*Value(j>>shift) {
				ok = false
				break
			}
		}
		if ok {
			return b
		}
	}
	if b, ok := classed(vs); ok {
		return b
	}
	return memoBlock{raw: append([]Value(nil), vs...)}
}

// classed returns vs as a classed block when that is smaller than raw.
func classed(vs []Value) (memoBlock, bool) {
	b := memoBlock{cls: make([]uint64, (len(vs)+31)/32)}
	haveE, haveC := false, false
	var next Value
	for j, v := range vs {
		c := uint64(3)
		id, ticket := TicketID(v)
		switch {
		case ticket && id < 1<<16:
			c = 2
			b.small = append(b.small, uint16(id))
		case ticket:
		case v&tagMask == tagMask && (!haveE || v == next):
			if !haveE {
				b.base[0], haveE = v, true
			}
			c, next = 0, v+1
		case v&tagMask != tagMask && (!haveC || v == b.base[1]):
			b.base[1], haveC, c = v, true, 1
		}
		if c == 3 {
			b.other = append(b.other, v)
		}
		b.cls[j/32] |= c << (2 * (j % 32))
	}
	if 14*len(b.cls)+2*len(b.small)+4*len(b.other) >= 4*len(vs) {
		return memoBlock{}, false
	}
	b.pre = make([][3]uint16, len(b.cls))
	var n [3]uint16
	for w, x := range b.cls {
		b.pre[w] = n
		for k, c := range [3]uint64{0, 2, 3} {
			n[k] += uint16(bits.OnesCount64(matches(x, c)))
		}
	}
	return b, true
}

// matches returns a bit per 2-bit field of x that holds class c.
func matches(x, c uint64) uint64 {
	x ^= c * 0x5555555555555555 // c in every 2-bit field
	return ^(x | x>>1) & 0x5555555555555555
}

// rank counts the values before j of class c (0, 2 or 3; k its index in
// pre) in a classed block: the count before j's word, from pre, and those
// before j in the word.
func (b *memoBlock) rank(j uint64, c uint64, k int) int {
	w := j / 32
	return int(b.pre[w][k]) + bits.OnesCount64(matches(b.cls[w], c)&(1<<(2*(j%32))-1))
}

func (b *memoBlock) at(j uint64) Value {
	if b.raw != nil {
		return b.raw[j]
	}
	if b.cls != nil {
		switch c := b.cls[j/32] >> (2 * (j % 32)) & 3; c {
		case 0:
			return b.base[0] + Value(b.rank(j, 0, 0))
		case 1:
			return b.base[1]
		case 2:
			return Ticket(uint32(b.small[b.rank(j, 2, 1)]))
		default:
			return b.other[b.rank(j, 3, 2)]
		}
	}
	ph := j & (1<<b.shift - 1)
	return b.base[ph] + b.step[ph]*Value(j>>b.shift)
}

// memoOldAt returns memo entry idx, below memoBase. A snapshot's every
// entry fetches its keys and its action from the memo, where they were
// first met, long compacted: the latest entries fetched are cached
// (oldHot), so that they cost no block's arithmetic.
func (d *Decoder) memoOldAt(idx uint64) Value {
	c := &d.oldHot[idx&(oldHotSize-1)]
	if c.idx == idx+1 {
		return c.v
	}
	v := d.memoOld[idx>>d.memoShift].at(idx & (1<<d.memoShift - 1))
	c.idx, c.v = idx+1, v
	return v
}

// oldHotSize is the number of memo entries below memoBase cached by
// memoOldAt, by their index modulo oldHotSize.
const oldHotSize = 256

// hotEntry is a memo entry cached by memoOldAt: idx is its index plus
// one (0: none).
type hotEntry struct {
	idx uint64
	v   Value
}

// memoLen is the memo's length (the index the next MEMOIZE stores at).
func (d *Decoder) memoLen() uint64 { return d.memoBase + uint64(len(d.memo)) }

// compactMemo moves the whole blocks of memo (the decoder's latest memo
// entries, from memoBase) but the last into memoOld once there are enough,
// and returns what is left.
func (d *Decoder) compactMemo(memo []Value) []Value {
	if len(memo) < d.compactAt || d.sparse != nil {
		return memo
	}
	bl := 1 << d.memoShift
	n := (len(memo)/bl - 1) * bl
	for i := 0; i < n; i += bl {
		d.memoOld = append(d.memoOld, compress(memo[i:i+bl]))
	}
	d.memoBase += uint64(n)
	k := copy(memo, memo[n:])
	return memo[:k]
}

// memoSetOld stores v at memo entry idx, below memoBase.
func (d *Decoder) memoSetOld(idx uint64, v Value) {
	b := &d.memoOld[idx>>d.memoShift]
	if b.raw == nil {
		raw := make([]Value, 1<<d.memoShift)
		for j := range raw {
			raw[j] = b.at(uint64(j))
		}
		*b = memoBlock{raw: raw}
	}
	b.raw[idx&(1<<d.memoShift-1)] = v
	if c := &d.oldHot[idx&(oldHotSize-1)]; c.idx == idx+1 {
		c.v = v
	}
}
