package caching

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// fakeDevice is a driver.Device for tests: segments are placed one after
// another from fakeBase (each aligned to 2 MiB, never reused), and every
// call is logged.
type fakeDevice struct {
	next     uint64
	total    uint64 // 0: unlimited
	fraction float64
	reserved uint64
	calls    []string
	rec      []trace.Event
}

const fakeBase = 0x10000000000 // 1 TiB

func newFake() *fakeDevice { return &fakeDevice{next: fakeBase} }

func (d *fakeDevice) log(format string, args ...any) {
	d.calls = append(d.calls, fmt.Sprintf(format, args...))
}

func (d *fakeDevice) Cap() (uint64, bool) {
	if d.fraction > 0 && d.fraction < 1 {
		return uint64(d.fraction * float64(d.TotalBytes())), true
	}
	return 0, false
}

func (d *fakeDevice) TotalBytes() uint64 {
	if d.total == 0 {
		return 80 << 30
	}
	return d.total
}

func (d *fakeDevice) SetFraction(f float64) { d.fraction = f }

func (d *fakeDevice) Malloc(size uint64, _ trace.StreamID) (uint64, bool) {
	if a, ok := d.Cap(); ok && d.reserved+size > a {
		return 0, false
	}
	if d.total != 0 && d.reserved+size > d.total {
		return 0, false
	}
	addr := d.next
	d.next += (size + (2<<20 - 1)) &^ (2<<20 - 1)
	d.reserved += size
	d.log("malloc %#x+%d", addr, size)
	return addr, true
}

func (d *fakeDevice) Free(addr, size uint64) {
	d.reserved -= size
	d.log("free %#x+%d", addr, size)
}

func (d *fakeDevice) Reserve(size uint64, _ trace.StreamID) uint64 {
	addr := d.next
	d.next += size
	d.log("reserve %#x+%d", addr, size)
	return addr
}

func (d *fakeDevice) Map(addr, size uint64) bool {
	if d.total != 0 && d.reserved+size > d.total {
		return false
	}
	d.reserved += size
	d.log("map %#x+%d", addr, size)
	return true
}

func (d *fakeDevice) Unmap(addr, size uint64) {
	d.reserved -= size
	d.log("unmap %#x+%d", addr, size)
}

func (d *fakeDevice) Recorded() []trace.Event { return d.rec }

func (d *fakeDevice) takeCalls() string {
	s := strings.Join(d.calls, "; ")
	d.calls = d.calls[:0]
	return s
}

// segString renders the allocator's segments compactly:
// "L0 0x..: A1024 F2096128 | S..." with A = allocated, P = pending, F = free.
func segString(a *Allocator) string {
	var parts []string
	a.Segments(func(s trace.Segment) bool {
		var bs []string
		for _, b := range s.Blocks {
			c := "F"
			switch b.State {
			case trace.BlockAllocated:
				c = "A"
			case trace.BlockPendingFree:
				c = "P"
			}
			bs = append(bs, fmt.Sprintf("%s%d", c, b.SizeBytes))
		}
		p := "L"
		if s.Pool == "small" {
			p = "S"
		}
		parts = append(parts, fmt.Sprintf("%s%d %#x: %s", p, s.Stream, s.Addr, strings.Join(bs, " ")))
		return true
	})
	return strings.Join(parts, " | ")
}

// step is one operation of a table test.
type step struct {
	op     string // malloc, free (requested+completed), req, done, empty, fraction, begin, end, release
	pool   uint64 // begin, end, release: the private pool's ID
	size   uint64 // malloc size
	stream trace.StreamID
	addr   uint64 // malloc: want address (0: OOM expected); free/req/done: the block
	calls  string // device calls it must make (checked when non-empty; "-" means none)
	rec    []trace.Event
}

type tableCase struct {
	name   string
	conf   string
	total  uint64
	frac   float64
	steps  []step
	after  string // segString after the steps ("" to skip)
	strand uint64 // inactive_split_bytes after
}

func mustNew(t *testing.T, dev *fakeDevice, conf string) *Allocator {
	t.Helper()
	cfg, err := ParseConf(conf)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func runTable(t *testing.T, cases []tableCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dev := newFake()
			dev.total = tc.total
			dev.fraction = tc.frac
			a := mustNew(t, dev, tc.conf)
			// blocks holds what Malloc returned, by address, for the frees.
			blocks := map[uint64]driver.Block{}
			block := func(addr uint64) driver.Block {
				if b, ok := blocks[addr]; ok {
					return b
				}
				return driver.Block{Addr: addr}
			}
			for i, s := range tc.steps {
				dev.calls = dev.calls[:0]
				switch s.op {
				case "malloc":
					b, err := a.Malloc(s.size, s.stream)
					if s.addr == 0 {
						if err == nil {
							t.Fatalf("step %d: malloc(%d) = %#x, want OOM", i, s.size, b.Addr)
						}
					} else if err != nil {
						t.Fatalf("step %d: malloc(%d): %v", i, s.size, err)
					} else if b.Addr != s.addr {
						t.Fatalf("step %d: malloc(%d) = %#x, want %#x\nstate: %s", i, s.size, b.Addr, s.addr, segString(a))
					}
					if err == nil {
						blocks[b.Addr] = b
					}
				case "free":
					a.FreeRequested(block(s.addr))
					a.FreeCompleted(block(s.addr))
					delete(blocks, s.addr)
				case "req":
					a.FreeRequested(block(s.addr))
				case "done":
					a.FreeCompleted(block(s.addr))
					delete(blocks, s.addr)
				case "empty":
					a.EmptyCache()
				case "rec":
					dev.rec = s.rec
				case "fraction":
					dev.fraction = float64(s.size) / 100
				case "begin":
					if err := a.BeginPool(s.pool, s.stream); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				case "end":
					a.EndPool(s.pool, s.stream)
				case "release":
					a.ReleasePool(s.pool)
				default:
					t.Fatalf("bad op %q", s.op)
				}
				if s.calls != "" {
					got := dev.takeCalls()
					want := s.calls
					if want == "-" {
						want = ""
					}
					if got != want {
						t.Fatalf("step %d (%s %d): device calls\n got %q\nwant %q", i, s.op, s.size, got, want)
					}
				}
			}
			if tc.after != "" {
				if got := segString(a); got != tc.after {
					t.Fatalf("state after:\n got %s\nwant %s", got, tc.after)
				}
			}
			if got := a.Stats().StrandedBytes; got != tc.strand {
				t.Fatalf("inactive_split_bytes = %d, want %d", got, tc.strand)
			}
			if a.ReservedBytes() != dev.reserved {
				t.Fatalf("allocator reserved %d != device reserved %d", a.ReservedBytes(), dev.reserved)
			}
		})
	}
}

var _ driver.Device = (*fakeDevice)(nil)
