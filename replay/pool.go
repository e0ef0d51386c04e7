package replay

// sharedPool is the memory of one physical device shared by several
// processes' simulated devices (Cohost). Each process's allocator sees its
// own device; a segment fits only when the sum of every member's reserved
// bytes, plus the memory held outside the allocators, stays within capacity.
type sharedPool struct {
	capacity uint64 // device memory; 0 = unlimited
	outside  uint64 // held outside every allocator (CUDA contexts, workspaces)
	devs     []*device
	// refused is the size of the last call the pool refused (what a
	// policy asked of the device), for OOM reports.
	refused uint64
	// flush, when set, passes the frees the members' engines hold back
	// to their policies (see Cohost); called before a refusal.
	flush   func()
	flushed bool // flush passed frees on since the flag was cleared
}

// reserved returns the bytes every member device holds.
func (p *sharedPool) reserved() uint64 {
	var r uint64
	for _, d := range p.devs {
		r += d.reserved
	}
	return r
}

// free returns the bytes the device can still give.
func (p *sharedPool) free() uint64 {
	if p.capacity == 0 {
		return unlimitedTotal
	}
	used := p.reserved() + p.outside
	if used >= p.capacity {
		return 0
	}
	return p.capacity - used
}

func (p *sharedPool) fits(size uint64) bool {
	if size <= p.free() {
		return true
	}
	if p.flush != nil {
		p.flush()
		if size <= p.free() {
			return true
		}
	}
	p.refused = size
	return false
}
