package caching

import (
	"errors"
	"sort"

	"github.com/fragsim/fragsim/trace"
)

// Private pools, as PyTorch keeps them for CUDA graph capture and
// torch.cuda.MemPool:
//   - BeginPool (beginAllocateToPool) makes the pool if it is new and
//     routes the requests of its stream (every request, for a MemPool
//     routed by thread) to it until EndPool (endAllocateToPool). When
//     several routes match, the newest wins (nested pools).
//   - A private pool has its own large and small BlockPools: its blocks
//     serve only requests routed to it, and its frees go back to it.
//   - While any route is active, a malloc that finds no block and no new
//     segment gives up without releasing the cache, and empty_cache
//     leaves the default pools alone.
//   - ReleasePool (the pool's use count dropping to 0: its graph or
//     MemPool destroyed) makes the pool freeable: each release of cached
//     blocks (empty_cache, a malloc's retry) then frees its whole free
//     segments too (pools in the order PyTorch's table of freeable pools
//     keeps them, each small then large), and the pool goes once it
//     holds none.

// firstPrivate is the index of the first private BlockPool.
const firstPrivate = 2

// privatePool is PyTorch's PrivatePool: its large and small BlockPools
// are pools[base] and pools[base+1].
type privatePool struct {
	id       uint64
	base     uint8
	segments int // device segments it holds (cudaMalloc'd or expandable)
	freeable bool
}

// route is one entry of PyTorch's captures_underway: requests on stream
// (any stream when stream is 0) go to the private pool at base.
type route struct {
	id     uint64
	stream trace.StreamID
	base   uint8
}

var errTooManyPools = errors.New("caching: more than 127 private pools live at once")

// maxPrivatePools is how many private pools can be live at once: a
// block's pool index is one byte.
const maxPrivatePools = (256 - firstPrivate) / 2

// route returns the pool a request of the default pool's kind p (large
// or small) on stream goes to: the newest matching route's, else p.
func (a *Allocator) route(p uint8, stream trace.StreamID) uint8 {
	for i := len(a.routes) - 1; i >= 0; i-- {
		if r := &a.routes[i]; r.stream == 0 || r.stream == stream {
			return r.base + p
		}
	}
	return p
}

// privateOf returns the private pool that owns BlockPool index pool.
func (a *Allocator) privateOf(pool uint8) *privatePool {
	base := pool &^ 1
	for i := range a.private {
		if a.private[i].base == base {
			return &a.private[i]
		}
	}
	panic("caching: a block of an unknown private pool")
}

// findPrivate returns the index in a.private of pool id, or -1.
func (a *Allocator) findPrivate(id uint64) int {
	i := sort.Search(len(a.private), func(i int) bool { return a.private[i].id >= id })
	if i < len(a.private) && a.private[i].id == id {
		return i
	}
	return -1
}

// BeginPool routes the requests on stream (all requests when stream is
// 0) to private pool id, making it if it is new (driver.Pooler).
func (a *Allocator) BeginPool(id uint64, stream trace.StreamID) error {
	i := a.findPrivate(id)
	if i < 0 {
		if len(a.private) >= maxPrivatePools {
			return errTooManyPools
		}
		base := a.freeBase()
		if int(base) >= len(a.pools) {
			a.pools = append(a.pools, blockPool{}, blockPool{})
		}
		i = sort.Search(len(a.private), func(i int) bool { return a.private[i].id >= id })
		a.private = append(a.private, privatePool{})
		copy(a.private[i+1:], a.private[i:])
		a.private[i] = privatePool{id: id, base: base}
	}
	if a.private[i].freeable {
		a.private[i].freeable = false
		a.freeable.eraseID(id)
	}
	a.routes = append(a.routes, route{id: id, stream: stream, base: a.private[i].base})
	return nil
}

// freeBase returns the first BlockPool index no private pool uses.
func (a *Allocator) freeBase() uint8 {
	for base := uint8(firstPrivate); ; base += 2 {
		used := false
		for i := range a.private {
			if a.private[i].base == base {
				used = true
				break
			}
		}
		if !used {
			return base
		}
	}
}

// EndPool ends the route that BeginPool(id, stream) began (driver.Pooler).
func (a *Allocator) EndPool(id uint64, stream trace.StreamID) {
	for i := len(a.routes) - 1; i >= 0; i-- {
		if a.routes[i].id == id && a.routes[i].stream == stream {
			a.routes = append(a.routes[:i], a.routes[i+1:]...)
			return
		}
	}
}

// ReleasePool makes private pool id freeable (driver.Pooler): its free
// segments go back to the device at the next release of cached blocks.
func (a *Allocator) ReleasePool(id uint64) {
	if i := a.findPrivate(id); i >= 0 && !a.private[i].freeable {
		a.private[i].freeable = true
		a.freeable.insert(id)
	}
}

// releaseFreeable is the private pools' part of release_cached_blocks,
// in the order of PyTorch's graph_pools_freeable (see freeableSet).
func (a *Allocator) releaseFreeable() {
	f := &a.freeable
	for i := 0; i < len(f.slots); {
		if f.slots[i].dist < 0 {
			i++
			continue
		}
		j := a.findPrivate(f.slots[i].id)
		p := a.private[j]
		a.releasePool(p.base + smallPool)
		a.releasePool(p.base + largePool)
		if a.private[j].segments > 0 {
			i++
			continue
		}
		a.pools[p.base], a.pools[p.base+1] = blockPool{}, blockPool{}
		a.private = append(a.private[:j], a.private[j+1:]...)
		f.eraseAt(i) // the next entry may shift into slot i
	}
}

// PrivatePools calls fn for each live private pool with its ID and
// whether it is freeable, in ID order.
func (a *Allocator) PrivatePools(fn func(id uint64, freeable bool)) {
	for _, p := range a.private {
		fn(p.id, p.freeable)
	}
}
