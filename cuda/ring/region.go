// Package ring reads the record region of fragsim's recording hook: the
// per-thread queues of recorded calls that the hook's C hot path writes
// (cuda/hook/ring.h is the C side of the same layout). The reader is either
// a goroutine of the recording process or the `fragsim record` parent,
// which maps the same file; so calls a thread published are drained even
// when the recording process dies without closing its trace.
//
// One reader at a time: the reader owns each queue's read position and
// hands drained chunks back to their thread (a spare ring per queue) or to
// the region's free stack.
package ring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Layout constants, equal to ring.h's.
const (
	Magic      = 0x31474e4952534746 // "FGSRING1"
	Version    = 1
	ChunkRecs  = 1024
	MaxQueues  = 1024
	Spares     = 32
	MetaMax    = 1 << 20
	RecBytes   = 64
	ChunkBytes = 64 + ChunkRecs*RecBytes
	QueueBytes = 256
	HdrBytes   = 4096
	QueuesOff  = HdrBytes
	MetaOff    = QueuesOff + MaxQueues*QueueBytes
	ChunksOff  = MetaOff + MetaMax

	// DefaultMaxChunks bounds a region to 1 GiB of chunks (16 M records).
	// Drained chunks are reused, so a region needs only what piles up
	// between two drains.
	DefaultMaxChunks = 16383
)

// Region states.
const (
	StateInit   = 0 // nobody records yet
	StateOpen   = 1 // recording; Meta holds the trace header
	StateClosed = 2 // the recording process closed the trace
)

// Queue states.
const (
	qFree     = 0
	qClaiming = 1
	qLive     = 2
	qDead     = 3
)

// Record kinds.
const (
	KindAlloc      = 1
	KindFree       = 2
	KindOOM        = 3
	KindEmptyCache = 4
	KindFraction   = 5
	KindMarker     = 6
	KindDeviceMem  = 7
	// The private-pool hooks' records: Stream the routed stream (0 for
	// every stream of a thread), Aux the pool's ID (trace.PoolID).
	KindPoolBegin     = 8
	KindPoolEnd       = 9
	KindPoolRelease   = 10
	KindFreeRequested = 11 // a free deferred by record_stream
	KindFreeCompleted = 12 // the deferred free's streams completed
)

// Header field offsets.
const (
	offMagic     = 0
	offVersion   = 8
	offState     = 12
	offSeq       = 16
	offLost      = 24
	offBrk       = 32
	offFreeTop   = 40
	offBacked    = 48
	offMaxChunks = 56
	offNQueues   = 64
	offPid       = 68
	offMetaLen   = 72
)

// Queue field offsets.
const (
	qoState     = 0
	qoWrite     = 8
	qoRead      = 12
	qoReadI     = 16
	qoSpareHead = 20
	qoSpareTail = 24
	qoSpare     = 32
)

// Chunk field offsets.
const (
	coN        = 0
	coNext     = 4
	coFreeNext = 8
	coRecs     = 64
)

// Size returns the bytes of a region of maxChunks chunks.
func Size(maxChunks int) int { return ChunksOff + maxChunks*ChunkBytes }

// Region is a view of a record region in memory.
type Region struct {
	mem       []byte
	maxChunks uint32
	unmap     func() error
	nextQ     uint32 // the queue the next drain starts with
}

// View reads the region at mem, which a recording process set up (or Init
// initialised).
func View(mem []byte) (*Region, error) {
	if len(mem) < ChunksOff {
		return nil, errors.New("ring: region too small")
	}
	r := &Region{mem: mem}
	if r.u64(offMagic) != Magic || r.u32(offVersion) != Version {
		return nil, errors.New("ring: not a fragsim record region of this version")
	}
	mc := r.u64(offMaxChunks)
	if mc == 0 || mc > uint64((len(mem)-ChunksOff)/ChunkBytes) {
		return nil, fmt.Errorf("ring: region holds %d bytes, too few for %d chunks", len(mem), mc)
	}
	r.maxChunks = uint32(mc)
	return r, nil
}

// Init writes a fresh header for maxChunks chunks, of which backed are
// usable now, into mem (zeroed) and returns its view.
func Init(mem []byte, maxChunks, backed int) (*Region, error) {
	if maxChunks <= 0 || len(mem) < Size(maxChunks) {
		return nil, fmt.Errorf("ring: %d bytes cannot hold %d chunks", len(mem), maxChunks)
	}
	r := &Region{mem: mem, maxChunks: uint32(maxChunks)}
	r.put64(offMagic, Magic)
	r.put32(offVersion, Version)
	r.put64(offMaxChunks, uint64(maxChunks))
	atomic.StoreUint64(r.p64(offBacked), uint64(backed))
	return r, nil
}

func (r *Region) p32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }
func (r *Region) p64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }
func (r *Region) u32(off int) uint32  { return atomic.LoadUint32(r.p32(off)) }
func (r *Region) u64(off int) uint64  { return atomic.LoadUint64(r.p64(off)) }
func (r *Region) put32(off int, v uint32) {
	atomic.StoreUint32(r.p32(off), v)
}
func (r *Region) put64(off int, v uint64) {
	atomic.StoreUint64(r.p64(off), v)
}

// State returns the region's state (State*).
func (r *Region) State() uint32 { return r.u32(offState) }

// SetState sets the region's state.
func (r *Region) SetState(s uint32) { r.put32(offState, s) }

// Pid returns the recording process's id (0 before it attached).
func (r *Region) Pid() int { return int(int32(r.u32(offPid))) }

// Lost returns the calls the recording process could not record (no room).
func (r *Region) Lost() uint64 { return r.u64(offLost) }

// Backed returns the chunks the region's file is long enough for.
func (r *Region) Backed() uint64 { return r.u64(offBacked) }

// Seq returns the next sequence number the recording process hands out.
func (r *Region) Seq() uint64 { return r.u64(offSeq) }

// Meta returns the header JSON the recording process stored, or nil.
func (r *Region) Meta() []byte {
	n := r.u32(offMetaLen)
	if n == 0 || n > MetaMax {
		return nil
	}
	return append([]byte(nil), r.mem[MetaOff:MetaOff+int(n)]...)
}

// SetMeta stores the trace header's JSON.
func (r *Region) SetMeta(b []byte) error {
	if len(b) > MetaMax {
		return fmt.Errorf("ring: trace header of %d bytes, more than %d", len(b), MetaMax)
	}
	copy(r.mem[MetaOff:], b)
	r.put32(offMetaLen, uint32(len(b)))
	return nil
}

// Close unmaps a region that Create or Map mapped.
func (r *Region) Close() error {
	if r.unmap == nil {
		return nil
	}
	err := r.unmap()
	r.unmap, r.mem = nil, nil
	return err
}

func queueOff(i uint32) int { return QueuesOff + int(i)*QueueBytes }
func chunkOff(i uint32) int { return ChunksOff + int(i)*ChunkBytes }

// chunkOK says whether a chunk index read from the region is in range: a
// recording process that died mid-write must not make the reader fault.
func (r *Region) chunkOK(i uint32) bool {
	return i < r.maxChunks && uint64(i) < r.u64(offBacked)
}

// pushFree puts chunk i on the region's free stack.
func (r *Region) pushFree(i uint32) {
	top := r.p64(offFreeTop)
	for {
		old := atomic.LoadUint64(top)
		atomic.StoreUint32(r.p32(chunkOff(i)+coFreeNext), uint32(old))
		nw := uint64(i+1) | (old>>32+1)<<32
		if atomic.CompareAndSwapUint64(top, old, nw) {
			return
		}
	}
}

// recycle hands drained chunk i back to queue q's owner, or to the free stack.
func (r *Region) recycle(q int, i uint32) {
	h := r.u32(q + qoSpareHead)
	if h-r.u32(q+qoSpareTail) < Spares {
		r.put32(q+qoSpare+4*int(h%Spares), i)
		r.put32(q+qoSpareHead, h+1)
		return
	}
	r.pushFree(i)
}

// retire frees a dead, drained queue: its chunks go to the free stack and
// the queue to the next thread that needs one.
func (r *Region) retire(q int, cur uint32) {
	r.pushFree(cur)
	h := r.u32(q + qoSpareHead)
	for t := r.u32(q + qoSpareTail); t != h; t++ {
		if i := r.u32(q + qoSpare + 4*int(t%Spares)); r.chunkOK(i) {
			r.pushFree(i)
		}
	}
	r.put32(q+qoSpareTail, h)
	r.put32(q+qoState, qFree)
}

// drain appends the records published since the last call, at most about
// max, to out, with each marker's text in texts (keyed by seq).
func (r *Region) drain(out []rec, max int, texts map[uint64]string) ([]rec, error) {
	nq := min(r.u32(offNQueues), MaxQueues)
	// Start where the last call stopped, so that a thread recording faster
	// than the reader drains cannot keep the others' records (and the
	// sequence numbers that release its own) waiting.
	start := r.nextQ
	if start >= nq {
		start = 0
	}
	for k := uint32(0); k < nq && len(out) < max; k++ {
		qi := (start + k) % nq
		r.nextQ = qi + 1
		q := queueOff(qi)
		for len(out) < max {
			// Read the state before the chunk: if the owner had exited,
			// every record it made is visible.
			st := r.u32(q + qoState)
			if st != qLive && st != qDead {
				break
			}
			ci := r.u32(q + qoRead)
			if !r.chunkOK(ci) {
				return out, fmt.Errorf("ring: queue %d reads chunk %d, out of range", qi, ci)
			}
			c := chunkOff(ci)
			next := r.u32(c + coNext) // before n: once next is set, n is final
			n := min(r.u32(c+coN), ChunkRecs)
			i := r.u32(q + qoReadI)
			for i < n && len(out) < max {
				x := r.rec(c + coRecs + int(i)*RecBytes)
				k := uint32(1)
				if x.kind == KindMarker {
					tl := min(x.size, uint64(n-i-1)*RecBytes)
					off := c + coRecs + int(i+1)*RecBytes
					texts[x.seq] = string(r.mem[off : off+int(tl)])
					k += uint32((tl + RecBytes - 1) / RecBytes)
				}
				out = append(out, x)
				i += k
			}
			r.put32(q+qoReadI, i)
			if i < n {
				break
			}
			if next == 0 {
				if st == qDead && n == r.u32(c+coN) {
					r.retire(q, ci)
				}
				break
			}
			if !r.chunkOK(next - 1) {
				return out, fmt.Errorf("ring: queue %d links to chunk %d, out of range", qi, next-1)
			}
			r.put32(q+qoRead, next-1)
			r.put32(q+qoReadI, 0)
			r.recycle(q, ci)
		}
	}
	return out, nil
}

func (r *Region) rec(off int) rec {
	b := r.mem[off : off+RecBytes : off+RecBytes]
	le := func(o int) uint64 { return *(*uint64)(unsafe.Pointer(&b[o])) }
	return rec{
		seq: le(0), timeNS: int64(le(8)), addr: le(16), size: le(24), stream: le(32), aux: le(40),
		device: int32(uint32(le(48))), tid: int32(uint32(le(48) >> 32)), kind: b[56], marker: b[57],
	}
}
