package replay

// liveMap maps recorded addresses to the live blocks of a device: open
// addressing with linear probing, like AddrMap, but with each block kept
// in its slot, so that an event's lookup touches one slot and nothing
// else. The zero value is ready to use.
type liveMap struct {
	slots []liveSlot
	n     int
	shift uint
}

type liveSlot struct {
	key uint64
	l   live // l.used marks the slot taken
}

func (m *liveMap) slot(key uint64) int {
	return int((key * 0x9E3779B97F4A7C15) >> m.shift)
}

func (m *liveMap) grow() {
	size := 2 * len(m.slots)
	if size == 0 {
		size = 1024
	}
	old := m.slots
	m.slots = make([]liveSlot, size)
	m.shift = 64
	for s := size; s > 1; s >>= 1 {
		m.shift--
	}
	m.n = 0
	for i := range old {
		if old[i].l.used {
			m.Insert(old[i].key, old[i].l)
		}
	}
}

// Len returns the number of live blocks.
func (m *liveMap) Len() int { return m.n }

// Get returns the block at key, valid until the next Set, Insert or Take.
func (m *liveMap) Get(key uint64) (*live, bool) {
	if m.n == 0 {
		return nil, false
	}
	mask := len(m.slots) - 1
	for i := m.slot(key); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if !s.l.used {
			return nil, false
		}
		if s.key == key {
			return &s.l, true
		}
	}
}

// Set sets the block at key.
func (m *liveMap) Set(key uint64, l live) {
	if p, ok := m.Get(key); ok {
		l.used = true
		*p = l
		return
	}
	m.Insert(key, l)
}

// Insert sets the block at key when key is absent; it reports false,
// changing nothing, when key is there.
func (m *liveMap) Insert(key uint64, l live) bool {
	if 2*(m.n+1) > len(m.slots) {
		m.grow()
	}
	mask := len(m.slots) - 1
	for i := m.slot(key); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if !s.l.used {
			l.used = true
			s.key, s.l = key, l
			m.n++
			return true
		}
		if s.key == key {
			return false
		}
	}
}

// Take removes the block at key and returns it.
func (m *liveMap) Take(key uint64) (live, bool) {
	if m.n == 0 {
		return live{}, false
	}
	mask := len(m.slots) - 1
	i := m.slot(key)
	for {
		if !m.slots[i].l.used {
			return live{}, false
		}
		if m.slots[i].key == key {
			break
		}
		i = (i + 1) & mask
	}
	l := m.slots[i].l
	l.used = false
	// backward-shift deletion keeps probe chains intact without tombstones
	j := i
	for {
		j = (j + 1) & mask
		if !m.slots[j].l.used {
			break
		}
		h := m.slot(m.slots[j].key)
		// move j to i when its home slot h is not in (i, j] cyclically
		if (j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j)) {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = liveSlot{}
	m.n--
	return l, true
}
