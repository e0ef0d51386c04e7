package pickle

// The memo of a large pickle is mostly the entries of a memory snapshot's
// trace: each entry dict and its "N/A" string are memoized, so the memo
// grows by two Values an entry (800 MB for a hundred million entries)
// although nothing refers to them again. DecodeDoc therefore keeps only the
// memo's latest entries in Decoder.memo (from index memoBase on) and moves
// older ones, every consumedEvery bytes once there are memoCompactAt of
// them, into blocks of 2^memoBlockShift that take a few words when their
// values follow a short periodic pattern (entry n, string, entry n+1,
// string...), and their values otherwise. Lookups below memoBase cost a
// block's arithmetic; the memo holds the same values either way. (Tests
// make the blocks, the threshold and the interval small: Decoder.memoShift,
// compactAt and checkEvery.)
const (
	memoBlockShift = 12
	memoCompactAt  = 1 << 18
)

// memoBlock holds a block of memo entries: raw, or, when raw is nil,
// value j is base[p] + step[p]·(j >> shift) with p = j mod 2^shift.
type memoBlock struct {
	raw   []Value
	shift uint8
	base  [4]Value
	step  [4]Value
}

// compress returns vs (a block's values, at least 8) as a patterned block
// when they follow a pattern of period 1, 2 or 4.
func compress(vs []Value) memoBlock {
	for shift := uint8(0); shift <= 2; shift++ {
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
	return memoBlock{raw: append([]Value(nil), vs...)}
}

func (b *memoBlock) at(j uint64) Value {
	if b.raw != nil {
		return b.raw[j]
	}
	ph := j & (1<<b.shift - 1)
	return b.base[ph] + b.step[ph]*Value(j>>b.shift)
}

// memoOldAt returns memo entry idx, below memoBase.
func (d *Decoder) memoOldAt(idx uint64) Value {
	return d.memoOld[idx>>d.memoShift].at(idx & (1<<d.memoShift - 1))
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
		b.raw = raw
	}
	b.raw[idx&(1<<d.memoShift-1)] = v
}
