package replay

import "sync"

// liveMap maps recorded addresses to the live blocks of a device: open
// addressing with linear probing over an array of keys alone (a probe
// reads 8 bytes a slot), with each block in a parallel array at its key's
// index, so that a lookup reads one block and no index. The zero value is
// ready to use.
type liveMap struct {
	keys  []uint64 // key+1 of the block in the slot; 0 when empty
	vals  []live
	n     int
	shift uint
	// hint is the slot Get found last: a free_completed most often
	// follows the free_requested of the same block, and Take looks there
	// first.
	hint int
	// The key math.MaxUint64, whose key+1 would read as empty, is kept apart.
	top    live
	hasTop bool
}

func (m *liveMap) slot(k uint64) int {
	return int((k * 0x9E3779B97F4A7C15) >> m.shift)
}

func (m *liveMap) grow() {
	size := 2 * len(m.keys)
	if size == 0 {
		size = 1024
	}
	oldK, oldV := m.keys, m.vals
	m.keys = make([]uint64, size)
	m.vals = make([]live, size)
	m.shift = 64
	for s := size; s > 1; s >>= 1 {
		m.shift--
	}
	mask := size - 1
	for i, k := range oldK {
		if k == 0 {
			continue
		}
		j := m.slot(k)
		for m.keys[j] != 0 {
			j = (j + 1) & mask
		}
		m.keys[j], m.vals[j] = k, oldV[i]
	}
}

// Len returns the number of live blocks.
func (m *liveMap) Len() int {
	if m.hasTop {
		return m.n + 1
	}
	return m.n
}

// Get returns the block at key, valid until the next Set, Insert or Take.
func (m *liveMap) Get(key uint64) (*live, bool) {
	k := key + 1
	if k == 0 {
		return &m.top, m.hasTop
	}
	if m.n == 0 {
		return nil, false
	}
	mask := len(m.keys) - 1
	for i := m.slot(k); ; i = (i + 1) & mask {
		switch m.keys[i] {
		case k:
			m.hint = i
			return &m.vals[i], true
		case 0:
			return nil, false
		}
	}
}

// Set sets the block at key.
func (m *liveMap) Set(key uint64, l live) {
	if p, ok := m.Get(key); ok {
		*p = l
		return
	}
	m.Insert(key, l)
}

// Insert sets the block at key when key is absent; it reports false,
// changing nothing, when key is there.
func (m *liveMap) Insert(key uint64, l live) bool {
	p, ok := m.Add(key)
	if ok {
		*p = l
	}
	return ok
}

// Add makes a slot for key when key is absent and returns it, for the
// caller to set every field (valid until the next Set, Insert, Add or
// Take); it reports false, changing nothing, when key is there.
func (m *liveMap) Add(key uint64) (*live, bool) {
	k := key + 1
	if k == 0 {
		if m.hasTop {
			return nil, false
		}
		m.hasTop = true
		return &m.top, true
	}
	if 2*(m.n+1) > len(m.keys) {
		m.grow()
	}
	mask := len(m.keys) - 1
	for i := m.slot(k); ; i = (i + 1) & mask {
		switch m.keys[i] {
		case 0:
			m.keys[i] = k
			m.n++
			return &m.vals[i], true
		case k:
			return nil, false
		}
	}
}

// Take removes the block at key and returns it.
func (m *liveMap) Take(key uint64) (live, bool) {
	k := key + 1
	if k == 0 {
		if !m.hasTop {
			return live{}, false
		}
		m.hasTop = false
		return m.top, true
	}
	i, ok := m.find(k)
	if !ok {
		return live{}, false
	}
	l := m.vals[i]
	m.removeAt(i)
	return l, true
}

// find returns the slot of key+1 k (not 0), looking first at the slot
// that the last Get found.
func (m *liveMap) find(k uint64) (int, bool) {
	if m.n == 0 {
		return 0, false
	}
	keys := m.keys
	mask := len(keys) - 1
	i := m.hint & mask
	if keys[i] != k {
		i = m.slot(k)
		for keys[i] != k {
			if keys[i] == 0 {
				return 0, false
			}
			i = (i + 1) & mask
		}
	}
	return i, true
}

// takeRef returns the block at key, to be read before the next change
// to the map, and the slot that remove removes it from. It reports false
// for key math.MaxUint64, which Take handles.
func (m *liveMap) takeRef(key uint64) (*live, int, bool) {
	k := key + 1
	if k == 0 {
		return nil, 0, false
	}
	i, ok := m.find(k)
	if !ok {
		return nil, 0, false
	}
	return &m.vals[i], i, true
}

// removeAt removes the block in slot i.
func (m *liveMap) removeAt(i int) {
	keys := m.keys
	mask := len(keys) - 1
	// backward-shift deletion keeps probe chains intact without tombstones
	j := i
	for {
		j = (j + 1) & mask
		kj := keys[j]
		if kj == 0 {
			break
		}
		h := m.slot(kj)
		// move j to i when its home slot h is not in (i, j] cyclically
		if (j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j)) {
			keys[i] = kj
			m.vals[i] = m.vals[j]
			i = j
		}
	}
	keys[i] = 0
	m.n--
}

// ref returns the block at key, valid until the next change to the map,
// and its slot, for removeAt. It reports false for key math.MaxUint64,
// which Get and Take handle.
func (m *liveMap) ref(key uint64) (*live, int, bool) {
	k := key + 1
	if k == 0 || m.n == 0 {
		return nil, 0, false
	}
	keys := m.keys
	mask := len(keys) - 1
	for i := m.slot(k); ; i = (i + 1) & mask {
		switch keys[i] {
		case k:
			m.hint = i
			return &m.vals[i], i, true
		case 0:
			return nil, 0, false
		}
	}
}

// liveArrays holds the arrays of finished replays' live maps (*liveMap,
// keys zeroed): a replay starts with the size the last one reached
// instead of growing its map from scratch, touching fresh pages and moving
// every block at each doubling.
var liveArrays sync.Pool

// reuse gives the empty map m the arrays of a finished replay's, if any.
func (m *liveMap) reuse() {
	if p, ok := liveArrays.Get().(*liveMap); ok && m.n == 0 && len(m.keys) == 0 {
		m.keys, m.vals, m.shift = p.keys, p.vals, p.shift
	}
}

// release empties m and gives its arrays to a later replay's map.
func (m *liveMap) release() {
	if len(m.keys) == 0 {
		return
	}
	clear(m.keys)
	liveArrays.Put(&liveMap{keys: m.keys, vals: m.vals, shift: m.shift})
	*m = liveMap{}
}
