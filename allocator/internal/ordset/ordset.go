// Package ordset is an ordered set of (size, address) keys for best-fit searches.
package ordset

// Key orders free ranges by size, then by address: the order of best-fit
// searches in PyTorch's and TensorFlow's allocators.
type Key struct {
	Size uint64
	Addr uint64
}

// Less reports whether k orders before o.
func (k Key) Less(o Key) bool {
	if k.Size != o.Size {
		return k.Size < o.Size
	}
	return k.Addr < o.Addr
}

type node struct {
	key         Key
	prio        uint64
	left, right *node
}

// Set is an ordered set of Keys (a treap with deterministic priorities).
// The zero value is an empty set.
type Set struct {
	root  *node
	n     int
	rng   uint64
	spare *node // deleted nodes, linked through right, for reuse
}

// Len returns the number of keys.
func (s *Set) Len() int { return s.n }

func (s *Set) nextPrio() uint64 {
	// splitmix64: deterministic, so runs are reproducible.
	s.rng += 0x9e3779b97f4a7c15
	z := s.rng
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// split divides t into keys < k and keys >= k.
func split(t *node, k Key) (l, r *node) {
	if t == nil {
		return nil, nil
	}
	if t.key.Less(k) {
		t.right, r = split(t.right, k)
		return t, r
	}
	l, t.left = split(t.left, k)
	return l, t
}

// merge joins l and r, every key of l ordering before every key of r.
func merge(l, r *node) *node {
	switch {
	case l == nil:
		return r
	case r == nil:
		return l
	case l.prio > r.prio:
		l.right = merge(l.right, r)
		return l
	default:
		r.left = merge(l, r.left)
		return r
	}
}

// Insert adds k; it reports false when k was already present.
func (s *Set) Insert(k Key) bool {
	if s.Contains(k) {
		return false
	}
	nd := s.spare
	if nd != nil {
		s.spare = nd.right
		*nd = node{key: k, prio: s.nextPrio()}
	} else {
		nd = &node{key: k, prio: s.nextPrio()}
	}
	s.root = insert(s.root, nd)
	s.n++
	return true
}

func insert(t, nd *node) *node {
	if t == nil {
		return nd
	}
	if nd.prio > t.prio {
		nd.left, nd.right = split(t, nd.key)
		return nd
	}
	if nd.key.Less(t.key) {
		t.left = insert(t.left, nd)
	} else {
		t.right = insert(t.right, nd)
	}
	return t
}

// Delete removes k; it reports false when k was absent.
func (s *Set) Delete(k Key) bool {
	p := &s.root
	for *p != nil {
		t := *p
		switch {
		case k == t.key:
			*p = merge(t.left, t.right)
			s.n--
			t.left, t.right = nil, s.spare
			s.spare = t
			return true
		case k.Less(t.key):
			p = &t.left
		default:
			p = &t.right
		}
	}
	return false
}

// Contains reports whether k is in the set.
func (s *Set) Contains(k Key) bool {
	t := s.root
	for t != nil {
		switch {
		case k == t.key:
			return true
		case k.Less(t.key):
			t = t.left
		default:
			t = t.right
		}
	}
	return false
}

// Ceil returns the smallest key >= k.
func (s *Set) Ceil(k Key) (Key, bool) {
	var best *node
	t := s.root
	for t != nil {
		if t.key.Less(k) {
			t = t.right
		} else {
			best = t
			t = t.left
		}
	}
	if best == nil {
		return Key{}, false
	}
	return best.key, true
}

// Max returns the largest key.
func (s *Set) Max() (Key, bool) {
	t := s.root
	if t == nil {
		return Key{}, false
	}
	for t.right != nil {
		t = t.right
	}
	return t.key, true
}

// Ascend calls fn for every key >= from in order until fn returns false.
func (s *Set) Ascend(from Key, fn func(Key) bool) {
	ascend(s.root, from, fn)
}

func ascend(t *node, from Key, fn func(Key) bool) bool {
	if t == nil {
		return true
	}
	if !t.key.Less(from) {
		if !ascend(t.left, from, fn) {
			return false
		}
		if !fn(t.key) {
			return false
		}
	}
	return ascend(t.right, from, fn)
}
