package pytorch

import "github.com/fragsim/fragsim/trace"

// blkMap holds the live blocks while the trace is undone, by address: an
// open-addressing table with linear probing, which undo reads and writes
// once or twice per entry, so it must cost little more than a slice
// index. Address 0 is stored aside, as the empty
// slot's key.
type blkMap struct {
	keys  []uint64
	vals  []rblk
	n     int
	zero  rblk
	zeroK bool
}

// rblk is a live block while the trace is undone.
type rblk struct {
	size    uint64 // 0 until known
	req     uint64
	pending bool // its free was requested, not completed
}

func (b rblk) state() trace.BlockState {
	if b.pending {
		return trace.BlockPendingFree
	}
	return trace.BlockAllocated
}

func (m *blkMap) slot(a uint64) int {
	h := (a >> 9) * 0x9e3779b97f4a7c15
	return int(h >> 32 & uint64(len(m.keys)-1))
}

// get returns a's block.
func (m *blkMap) get(a uint64) (rblk, bool) {
	if a == 0 {
		return m.zero, m.zeroK
	}
	if m.n == 0 {
		return rblk{}, false
	}
	for i := m.slot(a); ; i = (i + 1) & (len(m.keys) - 1) {
		switch m.keys[i] {
		case a:
			return m.vals[i], true
		case 0:
			return rblk{}, false
		}
	}
}

// put stores a's block.
func (m *blkMap) put(a uint64, b rblk) {
	if a == 0 {
		m.zero, m.zeroK = b, true
		return
	}
	if 4*(m.n+1) > 3*len(m.keys) {
		m.grow()
	}
	for i := m.slot(a); ; i = (i + 1) & (len(m.keys) - 1) {
		switch m.keys[i] {
		case a:
			m.vals[i] = b
			return
		case 0:
			m.keys[i], m.vals[i] = a, b
			m.n++
			return
		}
	}
}

// del removes a's block, shifting back the entries after it that probed
// past its slot.
func (m *blkMap) del(a uint64) {
	if a == 0 {
		m.zero, m.zeroK = rblk{}, false
		return
	}
	if m.n == 0 {
		return
	}
	mask := len(m.keys) - 1
	i := m.slot(a)
	for m.keys[i] != a {
		if m.keys[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	m.n--
	for j := (i + 1) & mask; m.keys[j] != 0; j = (j + 1) & mask {
		// Entry j may move back to i when its home slot is not in (i, j].
		if h := m.slot(m.keys[j]); (j-h)&mask >= (j-i)&mask {
			m.keys[i], m.vals[i] = m.keys[j], m.vals[j]
			i = j
		}
	}
	m.keys[i], m.vals[i] = 0, rblk{}
}

func (m *blkMap) grow() {
	keys, vals := m.keys, m.vals
	n := max(2*len(keys), 1024)
	m.keys, m.vals, m.n = make([]uint64, n), make([]rblk, n), 0
	for i, k := range keys {
		if k != 0 {
			m.put(k, vals[i])
		}
	}
}

// len returns the number of blocks.
func (m *blkMap) len() int {
	if m.zeroK {
		return m.n + 1
	}
	return m.n
}

// each calls f with every block, in no order.
func (m *blkMap) each(f func(a uint64, b rblk)) {
	if m.zeroK {
		f(0, m.zero)
	}
	for i, k := range m.keys {
		if k != 0 {
			f(k, m.vals[i])
		}
	}
}
