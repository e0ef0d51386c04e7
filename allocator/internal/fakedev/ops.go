package fakedev

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// Op is one step of a policy table test.
type Op struct {
	// Do is "malloc", "free" (requested then completed), "free_requested",
	// "free_completed" or "empty_cache".
	Do     string
	Size   uint64         // malloc: requested bytes
	Stream trace.StreamID // malloc: the stream
	Addr   uint64         // malloc: the address it must return; frees: the block
	Block  uint64         // malloc: the block size it must return (0: unchecked)
	OOM    bool           // malloc: it must fail with an error wrapping driver.ErrOOM
}

// String describes the op for failure messages.
func (o Op) String() string {
	switch o.Do {
	case "malloc":
		return fmt.Sprintf("malloc(%d, stream %d)", o.Size, o.Stream)
	case "empty_cache":
		return "empty_cache"
	}
	return fmt.Sprintf("%s(%#x)", o.Do, o.Addr)
}

// Checker is implemented by policies that can verify their own invariants.
type Checker interface{ Check() string }

// Run applies ops to p in order and fails t at the first result that
// differs from what an op states, or at the first broken invariant.
func Run(t testing.TB, p driver.Policy, d *Device, ops []Op) {
	t.Helper()
	// blocks holds what Malloc returned, by address, to pass to the frees.
	blocks := map[uint64]driver.Block{}
	block := func(addr uint64) driver.Block {
		if b, ok := blocks[addr]; ok {
			return b
		}
		return driver.Block{Addr: addr}
	}
	for i, o := range ops {
		switch o.Do {
		case "malloc":
			b, err := p.Malloc(o.Size, o.Stream)
			if o.OOM {
				if !errors.Is(err, driver.ErrOOM) {
					t.Fatalf("op %d %v: got block %#x (%d bytes), err %v; want out of memory", i, o, b.Addr, b.SizeBytes, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("op %d %v: %v", i, o, err)
			}
			if b.Addr != o.Addr || (o.Block != 0 && b.SizeBytes != o.Block) {
				t.Fatalf("op %d %v = %#x (%d bytes), want %#x (%d bytes)", i, o, b.Addr, b.SizeBytes, o.Addr, o.Block)
			}
			blocks[b.Addr] = b
		case "free":
			p.FreeRequested(block(o.Addr))
			p.FreeCompleted(block(o.Addr))
			delete(blocks, o.Addr)
		case "free_requested":
			p.FreeRequested(block(o.Addr))
		case "free_completed":
			p.FreeCompleted(block(o.Addr))
			delete(blocks, o.Addr)
		case "empty_cache":
			p.EmptyCache()
		default:
			t.Fatalf("op %d: unknown op %q", i, o.Do)
		}
		if c, ok := p.(Checker); ok {
			if msg := c.Check(); msg != "" {
				t.Fatalf("after op %d %v: %s", i, o, msg)
			}
		}
		if len(d.Errors) > 0 {
			t.Fatalf("after op %d %v: device misuse: %v", i, o, d.Errors)
		}
	}
}
