package synth

import (
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// countWriter counts the bytes written to it.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

func benchGenerate(b *testing.B, kinds []AgentKind, write bool) {
	cfg := DefaultConfig()
	cfg.Kinds = kinds
	cfg.Events = 1_000_000
	var events, bytes int64
	b.ReportAllocs()
	for b.Loop() {
		var sink trace.Sink = &discard{}
		var w *trace.Writer
		cw := &countWriter{}
		if write {
			var err error
			if w, err = trace.NewWriter(cw, cfg.Header()); err != nil {
				b.Fatal(err)
			}
			sink = w
		}
		st, err := Generate(sink, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if write {
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		}
		events += st.Events
		bytes += cw.n
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	if write {
		b.ReportMetric(float64(bytes)/float64(events), "bytes/event")
	}
}

// BenchmarkGenerate measures the generator alone (events dropped).
func BenchmarkGenerate(b *testing.B) {
	b.Run("encode", func(b *testing.B) { benchGenerate(b, []AgentKind{Encode}, false) })
	b.Run("decode", func(b *testing.B) { benchGenerate(b, []AgentKind{Decode}, false) })
	b.Run("train", func(b *testing.B) { benchGenerate(b, []AgentKind{Train}, false) })
}

// BenchmarkGenerateWrite measures generating and encoding a trace file.
func BenchmarkGenerateWrite(b *testing.B) {
	b.Run("encode", func(b *testing.B) { benchGenerate(b, []AgentKind{Encode}, true) })
	b.Run("mixed", func(b *testing.B) { benchGenerate(b, []AgentKind{Encode, Decode, Train}, true) })
}
