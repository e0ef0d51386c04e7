// Package snapgen writes synthetic PyTorch memory snapshots, shaped like
// the pickle torch.cuda.memory._dump_snapshot writes (protocol 4, framed,
// every entry dict and its "N/A" compile context memoized, keys and actions
// memoized once and fetched again), of any number of trace entries,
// streaming: unlike bench/import/gen_snapshot.py, which builds the snapshot
// in Python first, it needs no memory for the entries, so snapshots of a
// hundred million entries can be written for the import benchmarks
// (bench/import/genpickle) and tests.
//
// The workload is gen_snapshot.py's: a steady stream of allocs and frees
// (free_requested then free_completed) of at most 2,000 live blocks of
// five sizes, a segment_alloc now and then, times growing by 1-49 µs.
// With depth > 0 every entry has a Python stack of that many frames, one
// of 300, written as PyTorch 2.11 writes them with context="all": each
// distinct frame dict once, then fetched from the memo; a new frames list
// for each entry but a free_completed, which shares its free_requested's.
package snapgen

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
)

// Pickle opcodes (protocol 4).
const (
	opProto       = 0x80
	opFrame       = 0x95
	opEmptyDict   = '}'
	opEmptyList   = ']'
	opMemoize     = 0x94
	opMark        = '('
	opSetItems    = 'u'
	opAppends     = 'e'
	opAppend      = 'a'
	opShortBinUni = 0x8c
	opBinGet      = 'h'
	opLongBinGet  = 'j'
	opBinInt1     = 'K'
	opBinInt2     = 'M'
	opBinInt      = 'J'
	opLong1       = 0x8a
	opNewFalse    = 0x89
	opBinFloat    = 'G'
	opStop        = '.'
	frameTarget   = 64 << 10 // the pickler's frame size
)

type writer struct {
	w     *bufio.Writer
	frame []byte
	memo  uint64
	strs  map[string]uint64 // memoized strings fetched again
}

func (p *writer) op(b ...byte) { p.frame = append(p.frame, b...) }

// flush ends the current frame, as the pickler does between objects once
// a frame reaches its target size.
func (p *writer) flush(force bool) error {
	if len(p.frame) < frameTarget && !force || len(p.frame) == 0 {
		return nil
	}
	var hdr [9]byte
	hdr[0] = opFrame
	binary.LittleEndian.PutUint64(hdr[1:], uint64(len(p.frame)))
	if _, err := p.w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := p.w.Write(p.frame)
	p.frame = p.frame[:0]
	return err
}

func (p *writer) memoize() { p.op(opMemoize); p.memo++ }

func (p *writer) get(i uint64) {
	if i < 256 {
		p.op(opBinGet, byte(i))
		return
	}
	p.op(opLongBinGet, byte(i), byte(i>>8), byte(i>>16), byte(i>>24))
}

// str writes s, memoized; shared strings are fetched from the memo after
// their first time.
func (p *writer) str(s string, shared bool) {
	if i, ok := p.strs[s]; ok && shared {
		p.get(i)
		return
	}
	p.op(opShortBinUni, byte(len(s)))
	p.op([]byte(s)...)
	if shared {
		p.strs[s] = p.memo
	}
	p.memoize()
}

// int writes x as the pickler does: the shortest of BININT1, BININT2,
// BININT and LONG1.
func (p *writer) int(x int64) {
	switch {
	case x >= 0 && x <= 0xff:
		p.op(opBinInt1, byte(x))
	case x >= 0 && x <= 0xffff:
		p.op(opBinInt2, byte(x), byte(x>>8))
	case x >= -1<<31 && x < 1<<31:
		p.op(opBinInt, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
	default:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(x))
		n := 8
		for n > 1 && ((b[n-1] == 0 && b[n-2]&0x80 == 0) || (b[n-1] == 0xff && b[n-2]&0x80 != 0)) {
			n--
		}
		p.op(opLong1, byte(n))
		p.op(b[:n]...)
	}
}

// frame is a Python stack frame of an entry.
type frame struct {
	file, name string
	line       int64
}

// stackPool draws from rng 600 frames and 300 stacks of depth of them
// (indexes into the frames).
func stackPool(rng *rand.Rand, depth int) ([]frame, [][]int) {
	var pool []frame
	for i := range 600 {
		pool = append(pool, frame{fmt.Sprintf("/usr/lib/python3/site-packages/torch/nn/modules/module%d.py", i%40),
			fmt.Sprintf("forward_%d", i%120), 1 + rng.Int64N(3000)})
	}
	stacks := make([][]int, 300)
	for i := range stacks {
		for range depth {
			stacks[i] = append(stacks[i], rng.IntN(len(pool)))
		}
	}
	return pool, stacks
}

// tail writes the snapshot's keys after device_traces, the default
// allocator settings and no external annotations, and ends the pickle.
func (p *writer) tail() {
	p.str("allocator_settings", true)
	p.op(opEmptyDict)
	p.memoize()
	p.op(opMark)
	p.str("PYTORCH_CUDA_ALLOC_CONF", true)
	p.str("", true)
	p.str("max_split_size", true)
	p.int(-1)
	p.str("garbage_collection_threshold", true)
	p.op(opBinFloat, 0, 0, 0, 0, 0, 0, 0, 0)
	p.str("expandable_segments", true)
	p.op(opNewFalse)
	p.op(opSetItems)
	p.str("external_annotations", true)
	p.op(opEmptyList)
	p.memoize()
	p.op(opSetItems, opStop)
}

// Write writes a snapshot of n trace entries to w, drawn from seed, each
// with a Python stack of depth frames (0: none).
func Write(w io.Writer, n int64, seed uint64, depth int) error {
	p := &writer{w: bufio.NewWriterSize(w, 1<<20), strs: map[string]uint64{}}
	if _, err := p.w.Write([]byte{opProto, 4}); err != nil {
		return err
	}
	const mib = 1 << 20
	const base = 0x7f00_0000_0000
	rng := rand.New(rand.NewPCG(seed, 0))
	sizes := []int64{512, 4096, 65536, 1 << 20, 3*mib + 100}
	p.op(opEmptyDict)
	p.memoize()
	p.op(opMark)
	p.str("segments", true)
	p.op(opEmptyList)
	p.memoize()
	p.str("device_traces", true)
	p.op(opEmptyList)
	p.memoize()
	p.op(opEmptyList)
	p.memoize()
	t := int64(1_764_000_000_000_000)
	var live []int64 // addresses, a stack of slots
	liveSize := map[int64]int64{}
	next, seg := int64(base), int64(base)
	var k int64
	pool, stacks := stackPool(rng, depth)
	frameMemo := map[int]uint64{}
	var lastList uint64
	framesOf := func(action string) {
		if action == "free_completed" {
			p.get(lastList) // the free_requested's list
			return
		}
		p.op(opEmptyList)
		lastList = p.memo
		p.memoize()
		p.op(opMark)
		for _, f := range stacks[rng.IntN(len(stacks))] {
			if i, ok := frameMemo[f]; ok {
				p.get(i)
				continue
			}
			frameMemo[f] = p.memo
			p.op(opEmptyDict)
			p.memoize()
			p.op(opMark)
			p.str("name", true)
			p.str(pool[f].name, true)
			p.str("filename", true)
			p.str(pool[f].file, true)
			p.str("line", true)
			p.int(pool[f].line)
			p.op(opSetItems)
		}
		p.op(opAppends)
	}
	entry := func(action string, addr, size int64) error {
		if k%1000 == 0 {
			p.op(opMark)
		}
		t += 1 + rng.Int64N(49)
		p.op(opEmptyDict)
		p.memoize()
		p.op(opMark)
		p.str("action", true)
		p.str(action, true)
		p.str("addr", true)
		p.int(addr)
		p.str("size", true)
		p.int(size)
		p.str("stream", true)
		p.int(0)
		p.str("time_us", true)
		p.int(t)
		if depth > 0 {
			p.str("frames", true)
			framesOf(action)
		}
		p.str("compile_context", true)
		p.str("N/A", false) // a new string in every entry, as PyTorch writes
		p.str("user_metadata", true)
		p.str("", true)
		p.op(opSetItems)
		k++
		if k%1000 == 0 || k == n {
			p.op(opAppends)
		}
		return p.flush(false)
	}
	for k < n {
		if len(live) > 2000 || (len(live) > 0 && rng.Float64() < 0.5) {
			i := rng.IntN(len(live))
			a := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			size := liveSize[a]
			delete(liveSize, a)
			if err := entry("free_requested", a, size); err != nil {
				return err
			}
			if k < n {
				if err := entry("free_completed", a, size); err != nil {
					return err
				}
			}
			continue
		}
		if rng.Float64() < 0.01 {
			if err := entry("segment_alloc", seg, 20*mib); err != nil {
				return err
			}
			seg += 0x1000_0000
			if k == n {
				break
			}
		}
		size := sizes[rng.IntN(len(sizes))]
		a := next
		next += 0x100_0000
		live = append(live, a)
		liveSize[a] = size
		if err := entry("alloc", a, size); err != nil {
			return err
		}
	}
	p.op(opAppend) // the device's list into device_traces
	p.tail()
	if err := p.flush(true); err != nil {
		return err
	}
	return p.w.Flush()
}
