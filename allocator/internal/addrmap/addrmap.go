// Package addrmap is an open-addressing hash table from addresses to int32
// values, for the per-event lookups of policies.
package addrmap

// Map maps addresses to int32 values: an open-addressing hash table
// with linear probing, for the per-event lookups of policies (faster than
// a Go map for this one job). The zero value is
// ready to use.
type Map struct {
	slots []amSlot
	n     int
	shift uint
}

type amSlot struct {
	key  uint64
	val  int32
	used bool
}

func (m *Map) slot(key uint64) int {
	return int((key * 0x9E3779B97F4A7C15) >> m.shift)
}

func (m *Map) grow() {
	size := 2 * len(m.slots)
	if size == 0 {
		size = 1024
	}
	old := m.slots
	m.slots = make([]amSlot, size)
	m.shift = 64
	for s := size; s > 1; s >>= 1 {
		m.shift--
	}
	m.n = 0
	for _, s := range old {
		if s.used {
			m.Set(s.key, s.val)
		}
	}
}

// Len returns the number of entries.
func (m *Map) Len() int { return m.n }

// Get returns the value of key.
func (m *Map) Get(key uint64) (int32, bool) {
	if m.n == 0 {
		return 0, false
	}
	mask := len(m.slots) - 1
	for i := m.slot(key); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if !s.used {
			return 0, false
		}
		if s.key == key {
			return s.val, true
		}
	}
}

// Set sets the value of key.
func (m *Map) Set(key uint64, v int32) {
	if 2*(m.n+1) > len(m.slots) {
		m.grow()
	}
	mask := len(m.slots) - 1
	for i := m.slot(key); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if !s.used {
			*s = amSlot{key: key, val: v, used: true}
			m.n++
			return
		}
		if s.key == key {
			s.val = v
			return
		}
	}
}

// Insert sets key to v when key is absent; it reports false, changing
// nothing, when key is there.
func (m *Map) Insert(key uint64, v int32) bool {
	if 2*(m.n+1) > len(m.slots) {
		m.grow()
	}
	mask := len(m.slots) - 1
	for i := m.slot(key); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if !s.used {
			*s = amSlot{key: key, val: v, used: true}
			m.n++
			return true
		}
		if s.key == key {
			return false
		}
	}
}

// Delete removes key; it reports whether key was there.
func (m *Map) Delete(key uint64) bool {
	_, ok := m.Take(key)
	return ok
}

// Take removes key and returns its value.
func (m *Map) Take(key uint64) (int32, bool) {
	if m.n == 0 {
		return 0, false
	}
	mask := len(m.slots) - 1
	i := m.slot(key)
	for {
		if !m.slots[i].used {
			return 0, false
		}
		if m.slots[i].key == key {
			break
		}
		i = (i + 1) & mask
	}
	v := m.slots[i].val
	// backward-shift deletion keeps probe chains intact without tombstones
	j := i
	for {
		j = (j + 1) & mask
		if !m.slots[j].used {
			break
		}
		h := m.slot(m.slots[j].key)
		// move j to i when its home slot h is not in (i, j] cyclically
		if (j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j)) {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = amSlot{}
	m.n--
	return v, true
}

// Clone returns a copy of m.
func (m *Map) Clone() Map {
	return Map{slots: append([]amSlot(nil), m.slots...), n: m.n, shift: m.shift}
}
