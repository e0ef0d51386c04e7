package replay

// Layout of cudaMalloc segments that have no recorded address (what-ifs,
// live recordings, RMM logs, synthetic traces). Best fit breaks ties
// between equal free blocks by address, so where a segment lies decides
// which block a policy reuses, and with it the peak reserved and the
// number of device allocations. The layout is the CUDA driver's (driver
// 580, H200, a process whose only other device memory is its primary
// context's), a pure function of the sequence of cudaMalloc and cudaFree
// calls; addresses are offsets from the driver's first chunk:
//
//   - A request of n bytes takes n rounded up to 2 MiB (measured on
//     multiples of 2 MiB, as every PyTorch segment is; smaller requests
//     are taken the same way).
//   - Address space comes in chunks of whole 32 MiB, each holding one or
//     more segments. The context holds two chunks before the first request:
//     one at offset 0 with its top 2 MiB free, one at 96 MiB with its top
//     24 MiB free; neither is ever released.
//   - A request goes to the most recently made chunk that has a free hole
//     large enough, and there to the smallest such hole (the lowest of
//     equal ones), at the hole's start.
//   - When no chunk has one, a new chunk of the request rounded up to
//     32 MiB is made at the top of the highest gap between chunks, below
//     offset -384 MiB, that is strictly larger than it; with no such gap,
//     directly below the lowest chunk. The segment starts at the chunk's
//     start; the rest is a hole.
//   - A free makes a hole, merged with the holes next to it in its chunk.
//     A chunk left with no segment is released: its range becomes a gap.
//
// This places at the driver's offset every segment of 240 random call
// sequences run in fresh processes (19,841 allocations of 2 MiB to 16 GiB,
// 10,759 frees), and every segment of the committed traces' recorded
// segment_alloc/segment_free sequences replayed by the driver (53
// sequences, 4,697 segments). A recorded PyTorch process agrees with it
// from its first segment to its last when it makes no other device
// allocations (24 of those 53: one stream, no library kernels); other
// streams, cuBLAS and kernel modules take memory the trace does not show,
// and the process's later segments lie elsewhere.
//
// The first chunk is at LayoutBase, unless the device's first segment has
// a recorded address: then at the address that puts that segment there, so
// that laid-out segments lie where the recording's driver would have put
// them. A laid-out segment that would overlap a live recorded segment or a
// reserved range takes the range layout (see placeRange) instead; the
// model still counts it where it would be.
const (
	LayoutBase = 0x7f0000000000

	layoutPage  = 2 << 20  // the driver's allocation granularity
	layoutChunk = 32 << 20 // the driver's chunk granularity
	layoutFloor = -384 << 20
)

// hole is a free range [off, off+size) of a chunk.
type hole struct {
	off  int64
	size uint64
}

// chunk is one driver chunk; released chunks keep their index with size 0.
type chunk struct {
	off      int64
	size     uint64
	used     uint64
	internal bool   // the context's: never released
	holes    []hole // by offset
}

// driverLayout is the driver's allocator of cudaMalloc segments, in offsets
// from base. Finding a chunk and a gap costs O(log chunks); a chunk's holes
// are searched in a scan (a chunk holds at most size/2 MiB segments).
type driverLayout struct {
	base     uint64
	anchored bool    // base is set: the device's first segment was placed
	chunks   []chunk // in the order they were made
	largest  tails   // largest[i].size: chunk i's largest hole
	gaps     gapSet  // released ranges between chunks, below layoutFloor
	low      int64   // the start of the lowest chunk below layoutFloor
}

func newDriverLayout() driverLayout {
	l := driverLayout{base: LayoutBase, low: layoutFloor}
	l.addChunk(chunk{off: 96 << 20, size: layoutChunk, used: 8 << 20, internal: true,
		holes: []hole{{off: 104 << 20, size: 24 << 20}}})
	l.addChunk(chunk{off: 0, size: layoutChunk, used: 30 << 20, internal: true,
		holes: []hole{{off: 30 << 20, size: 2 << 20}}})
	return l
}

func (l *driverLayout) addChunk(c chunk) {
	l.chunks = append(l.chunks, c)
	l.largest.push(span{size: c.largestHole()})
}

func (c *chunk) largestHole() uint64 {
	var m uint64
	for _, h := range c.holes {
		m = max(m, h.size)
	}
	return m
}

// addr returns the address of offset off.
func (l *driverLayout) addr(off int64) uint64 { return l.base + uint64(off) }

func pages(size uint64) uint64 { return (max(size, 1) + layoutPage - 1) / layoutPage * layoutPage }

// alloc lays out a segment of size bytes and returns its offset and the
// index of its chunk.
func (l *driverLayout) alloc(size uint64) (int64, int) {
	s := pages(size)
	if i := l.largest.last(len(l.chunks), s); i >= 0 {
		c := &l.chunks[i]
		best := -1
		for j, h := range c.holes {
			if h.size >= s && (best < 0 || h.size < c.holes[best].size) {
				best = j
			}
		}
		h := &c.holes[best]
		off := h.off
		if h.size == s {
			c.holes = append(c.holes[:best], c.holes[best+1:]...)
		} else {
			h.off += int64(s)
			h.size -= s
		}
		c.used += s
		l.largest.s[i].size = c.largestHole()
		l.largest.shrunk(i)
		return off, i
	}
	n := (s + layoutChunk - 1) / layoutChunk * layoutChunk
	off, ok := l.gaps.takeTop(n)
	if !ok {
		l.low -= int64(n)
		off = l.low
	}
	c := chunk{off: off, size: n, used: s}
	if n > s {
		c.holes = []hole{{off: off + int64(s), size: n - s}}
	}
	l.addChunk(c)
	return off, len(l.chunks) - 1
}

// free returns the segment of size bytes at offset off of chunk i.
func (l *driverLayout) free(i int, off int64, size uint64) {
	c := &l.chunks[i]
	s := pages(size)
	c.used -= s
	if c.used == 0 && !c.internal {
		l.release(c.off, c.size)
		*c = chunk{}
		l.largest.s[i].size = 0
		l.largest.shrunk(i)
		return
	}
	j := 0
	for j < len(c.holes) && c.holes[j].off < off {
		j++
	}
	h := hole{off: off, size: s}
	if j > 0 && c.holes[j-1].off+int64(c.holes[j-1].size) == off {
		j--
		h = hole{off: c.holes[j].off, size: c.holes[j].size + s}
		c.holes = append(c.holes[:j], c.holes[j+1:]...)
	}
	if j < len(c.holes) && h.off+int64(h.size) == c.holes[j].off {
		h.size += c.holes[j].size
		c.holes[j] = h
	} else {
		c.holes = append(c.holes, hole{})
		copy(c.holes[j+1:], c.holes[j:])
		c.holes[j] = h
	}
	l.largest.s[i].size = c.largestHole()
	l.largest.shrunk(i)
}

// release makes the range of a released chunk a gap, or gives it back to
// the unbounded range below the lowest chunk.
func (l *driverLayout) release(off int64, size uint64) {
	end := off + int64(size)
	if above, ok := l.gaps.at(end); ok {
		l.gaps.remove(end)
		end += int64(above)
	}
	if off == l.low {
		l.low = end
		return
	}
	if below, ok := l.gaps.endingAt(off); ok {
		l.gaps.remove(below)
		off = below
	}
	l.gaps.insert(off, uint64(end-off))
}
