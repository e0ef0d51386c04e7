package replay

// gapSet holds disjoint ranges [off, off+size) in a treap keyed by offset,
// each node with the largest size in its subtree, so that the highest gap
// larger than a size is found in O(log gaps).
type gapSet struct {
	root *gapNode
	seed uint64
}

type gapNode struct {
	off         int64
	size, max   uint64
	prio        uint64
	left, right *gapNode
}

func (n *gapNode) fix() {
	n.max = n.size
	if n.left != nil {
		n.max = max(n.max, n.left.max)
	}
	if n.right != nil {
		n.max = max(n.max, n.right.max)
	}
}

// gapSplit cuts t into the nodes below off and those at or above it.
func gapSplit(t *gapNode, off int64) (*gapNode, *gapNode) {
	if t == nil {
		return nil, nil
	}
	if t.off < off {
		l, r := gapSplit(t.right, off)
		t.right = l
		t.fix()
		return t, r
	}
	l, r := gapSplit(t.left, off)
	t.left = r
	t.fix()
	return l, t
}

// gapJoin joins a and b, every offset of a below every offset of b.
func gapJoin(a, b *gapNode) *gapNode {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	if a.prio > b.prio {
		a.right = gapJoin(a.right, b)
		a.fix()
		return a
	}
	b.left = gapJoin(a, b.left)
	b.fix()
	return b
}

func (g *gapSet) insert(off int64, size uint64) {
	// A fixed xorshift sequence: the shape, not the result, depends on it.
	if g.seed == 0 {
		g.seed = 0x9e3779b97f4a7c15
	}
	g.seed ^= g.seed << 13
	g.seed ^= g.seed >> 7
	g.seed ^= g.seed << 17
	n := &gapNode{off: off, size: size, max: size, prio: g.seed}
	l, r := gapSplit(g.root, off)
	g.root = gapJoin(gapJoin(l, n), r)
}

func (g *gapSet) remove(off int64) {
	l, r := gapSplit(g.root, off)
	_, r = gapSplit(r, off+1)
	g.root = gapJoin(l, r)
}

// at returns the size of the gap that starts at off.
func (g *gapSet) at(off int64) (uint64, bool) {
	for t := g.root; t != nil; {
		switch {
		case off < t.off:
			t = t.left
		case off > t.off:
			t = t.right
		default:
			return t.size, true
		}
	}
	return 0, false
}

// endingAt returns the start of the gap that ends at end.
func (g *gapSet) endingAt(end int64) (int64, bool) {
	var below *gapNode // the highest gap starting below end
	for t := g.root; t != nil; {
		if t.off < end {
			below = t
			t = t.right
		} else {
			t = t.left
		}
	}
	if below != nil && below.off+int64(below.size) == end {
		return below.off, true
	}
	return 0, false
}

// takeTop takes n bytes from the top of the highest gap larger than n and
// returns their offset.
func (g *gapSet) takeTop(n uint64) (int64, bool) {
	t := g.root
	if t == nil || t.max <= n {
		return 0, false
	}
	for {
		if t.right != nil && t.right.max > n {
			t = t.right
		} else if t.size > n {
			break
		} else {
			t = t.left
		}
	}
	off, size := t.off, t.size-n
	g.remove(off)
	g.insert(off, size)
	return off + int64(size), true
}
