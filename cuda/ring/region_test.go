package ring

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/fragsim/fragsim/trace"
)

// writer plays the hook's C side on a region in Go: it claims queues,
// takes chunks from the end and publishes records, so that the reader can
// be tested without the C library.
type writer struct {
	r   *Region
	seq uint64
}

func (w *writer) claim(qi uint32) int {
	q := queueOff(qi)
	c := w.newChunk()
	w.r.put32(q+qoRead, c)
	w.r.put32(q+qoWrite, c) // write
	w.r.put32(q+qoReadI, 0)
	if n := w.r.u32(offNQueues); n < qi+1 {
		w.r.put32(offNQueues, qi+1)
	}
	w.r.put32(q+qoState, qLive)
	return q
}

func (w *writer) newChunk() uint32 {
	b := atomic.AddUint64(w.r.p64(offBrk), 1) - 1
	return uint32(b)
}

// put publishes one record (and text, for a marker) in queue q, moving to
// a new chunk when the current one has too little room.
func (w *writer) put(q int, kind uint8, size uint64, text string) {
	k := uint32(1 + (len(text)+RecBytes-1)/RecBytes)
	ci := w.r.u32(q + qoRead - 4)
	c := chunkOff(ci)
	n := w.r.u32(c + coN)
	if n+k > ChunkRecs {
		nc := w.newChunk()
		w.r.put32(c+coNext, nc+1)
		w.r.put32(q+qoWrite, nc)
		ci, c, n = nc, chunkOff(nc), 0
	}
	off := c + coRecs + int(n)*RecBytes
	rec := w.r.mem[off : off+RecBytes]
	binary.LittleEndian.PutUint64(rec[0:], w.seq)
	binary.LittleEndian.PutUint64(rec[8:], uint64(1000+w.seq))
	binary.LittleEndian.PutUint64(rec[16:], 0x1000+w.seq)
	binary.LittleEndian.PutUint64(rec[24:], size)
	rec[56] = kind
	copy(w.r.mem[off+RecBytes:], text)
	w.seq++
	w.r.put32(c+coN, n+k)
}

func newRegion(t *testing.T, chunks int) *Region {
	t.Helper()
	mem := make([]byte, Size(chunks))
	if uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		t.Skip("unaligned buffer")
	}
	r, err := Init(mem, chunks, chunks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := View(mem); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDrainQueues fills two queues across chunk boundaries, with a marker
// whose text does not fit in what is left of a chunk, lets one thread die
// and checks that everything comes out in sequence order, the dead queue
// and its chunks are freed, and drained chunks are handed back.
func TestDrainQueues(t *testing.T) {
	r := newRegion(t, 16)
	w := &writer{r: r}
	q0, q1 := w.claim(0), w.claim(1)
	long := strings.Repeat("m", 3*RecBytes+5)
	for i := 0; i < 3000; i++ {
		q := q0
		if i%3 == 0 {
			q = q1
		}
		if i == 1021 {
			w.put(q, KindMarker, uint64(len(long)), long)
			continue
		}
		w.put(q, KindAlloc, uint64(i), "")
	}
	r.put32(q1+qoState, qDead)

	var buf []byte
	tw, err := trace.NewWriter(&byteSink{&buf}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDrainer(r, tw)
	if err := d.Drain(time.Now(), true); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "t.fst")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []trace.Event
	for {
		e, err := f.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	if len(evs) != 3000 || d.Missing() != 0 {
		t.Fatalf("%d events, %d missing; want 3000, 0", len(evs), d.Missing())
	}
	for i, e := range evs {
		if i == 1021 {
			if e.Kind != trace.KindMarker || f.String(e.Text) != long {
				t.Fatalf("event %d: %v %q, want the marker and its text", i, e.Kind, f.String(e.Text))
			}
			continue
		}
		if e.Kind != trace.KindAlloc || e.SizeBytes != uint64(i) || e.Addr != 0x1000+uint64(i) {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
	if st := r.u32(q1 + qoState); st != qFree {
		t.Errorf("dead queue in state %d after its drain, want free", st)
	}
	if r.u64(offFreeTop)&0xffffffff == 0 {
		t.Error("the dead queue's chunk is not on the free stack")
	}
	if h := r.u32(q0 + qoSpareHead); h == 0 {
		t.Error("no drained chunk handed back to the live queue")
	}
}

// TestDrainCorrupt checks that a region whose queue points outside it (a
// recording process that died writing it) is an error, not a fault.
func TestDrainCorrupt(t *testing.T) {
	r := newRegion(t, 4)
	w := &writer{r: r}
	q := w.claim(0)
	w.put(q, KindAlloc, 1, "")
	r.put32(chunkOff(0)+coNext, 1000)
	r.put32(chunkOff(0)+coN, ChunkRecs)
	_, err := r.drain(nil, 100000, map[uint64]string{})
	if err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("err %v, want a chunk out of range", err)
	}
}

type byteSink struct{ b *[]byte }

func (s *byteSink) Write(p []byte) (int, error) { *s.b = append(*s.b, p...); return len(p), nil }
