package pytorch

import (
	"sort"

	"github.com/fragsim/fragsim/trace"
)

// sizeGap is a block live at a device's first entry whose size the final
// segments do not give (it is freed within the trace): its end lies in
// [lo, hi), from its rounded request to the next live block or its
// segment's end.
type sizeGap struct {
	addr, lo, hi uint64
	end          uint64 // the end the entries show; 0 while unknown
	freed        bool   // its free completed before any entry showed its end
}

// shownEnds returns, for blocks of the large pool's non-expandable
// segments that are live at the device's first entry with no known size
// and with room after their rounded request, the ends that the device's
// entries show. The space after such a block, up to the next live block,
// is one free block (free neighbours merge), and best fit serves a
// request from the start of the block it takes; so while the live block
// is not yet freed, the first allocation anywhere in that space starts
// exactly at the live block's end. A block whose remainder was not split
// off (at most 1 MiB, or a request of at least max_split_size) is so
// told from one whose remainder was.
func (c *converter) shownEnds(dev int, st *devState, bases []uint64, addrs []uint64) map[uint64]uint64 {
	var q *devSeq
	for i := range c.snap.seqs {
		if int(c.snap.seqs[i].dev) == dev {
			q = &c.snap.seqs[i]
		}
	}
	if q == nil || c.snap.raw == nil {
		return nil
	}
	var gaps []sizeGap
	k := 0
	for _, base := range bases {
		r := st.segs[base]
		end := base + r.size
		for k < len(addrs) && addrs[k] < base {
			k++
		}
		for ; k < len(addrs) && addrs[k] < end; k++ {
			a := addrs[k]
			b, _ := st.active.get(a)
			if b.size != 0 || r.pool != "large" || r.expandable {
				continue
			}
			next := end
			if k+1 < len(addrs) && addrs[k+1] < end {
				next = addrs[k+1]
			}
			if lo := a + c.set.roundSize(b.req); lo < next {
				gaps = append(gaps, sizeGap{addr: a, lo: lo, hi: next})
			}
		}
	}
	if len(gaps) == 0 {
		return nil
	}
	byAddr := make(map[uint64]int, len(gaps))
	for i := range gaps {
		byAddr[gaps[i].addr] = i
	}
	err := c.snap.raw.blocks(q.from, q.to, false, func(_ int, evs []event) error {
		for i := range evs {
			e := &evs[i]
			switch e.Kind {
			case trace.KindAlloc:
				j := sort.Search(len(gaps), func(j int) bool { return gaps[j].hi > e.Addr })
				if j < len(gaps) && gaps[j].lo <= e.Addr {
					if g := &gaps[j]; g.end == 0 && !g.freed {
						g.end = e.Addr
					}
				}
			case trace.KindFreeCompleted:
				if j, ok := byAddr[e.Addr]; ok && gaps[j].end == 0 {
					gaps[j].freed = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil // the forward pass reads the same entries and reports it
	}
	out := map[uint64]uint64{}
	for _, g := range gaps {
		if g.end != 0 {
			out[g.addr] = g.end
		}
	}
	return out
}
