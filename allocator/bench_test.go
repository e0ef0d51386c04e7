package allocator

import (
	"testing"

	"github.com/fragsim/fragsim/allocator/internal/fakedev"
	"github.com/fragsim/fragsim/replay/driver"
)

// BenchmarkPolicy measures each policy on a transformer-like random request
// stream (about a third mallocs); ns/op is per request.
func BenchmarkPolicy(b *testing.B) {
	ops, _ := randomStream(7, 200_000)
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			f, err := NewFactory(name, "", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if n%len(ops) == 0 {
					b.StopTimer()
					d := &fakedev.Device{Total: 80 << 30, NoLog: true}
					p, err := f(d, nil)
					if err != nil {
						b.Fatal(err)
					}
					blocks := make(map[int]driver.Block, 1024)
					b.StartTimer()
					for _, o := range ops {
						switch o.kind {
						case 'm':
							blk, err := p.Malloc(o.size, o.stream)
							if err != nil {
								b.Fatal(err)
							}
							blocks[o.id] = blk
						case 'r':
							p.FreeRequested(blocks[o.id])
						case 'c':
							p.FreeCompleted(blocks[o.id])
							delete(blocks, o.id)
						case 'e':
							p.EmptyCache()
						}
						_ = p.Stats()
					}
				}
				n += len(ops)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/request")
		})
	}
}
