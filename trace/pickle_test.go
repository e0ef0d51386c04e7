package trace

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// pytorchSnapshotSizes runs testdata/pickle_snapshot.py on evs and returns
// the byte size of each variant of PyTorch's snapshot of them.
func pytorchSnapshotSizes(tb testing.TB, evs []Event) map[string]int {
	tb.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		tb.Skip("python3 not found")
	}
	var csv bytes.Buffer
	bw := bufio.NewWriter(&csv)
	for _, e := range evs {
		addr := e.Addr
		if e.Kind == KindOOM {
			addr = e.Aux
		}
		fmt.Fprintf(bw, "%s,%d,%d,%d,%d\n", e.Kind, addr, e.SizeBytes, e.Stream, e.TimeNS/1000)
	}
	bw.Flush()
	cmd := exec.Command(py, "testdata/pickle_snapshot.py")
	cmd.Stdin = &csv
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("pickle_snapshot.py: %v", err)
	}
	sizes := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			tb.Fatalf("pickle_snapshot.py printed %q", l)
		}
		n, _ := strconv.Atoi(f[1])
		if c, _ := strconv.Atoi(f[2]); c != len(evs) {
			tb.Fatalf("pickle_snapshot.py read %d events, want %d", c, len(evs))
		}
		sizes[f[0]] = n
	}
	return sizes
}

// BenchmarkSizeVsPickle compares the size of a trace with PyTorch's own
// gzip'd pickle snapshot of the same events (the transformer stream).
// Metrics: bytes/event of each, and how many times smaller the trace is.
func BenchmarkSizeVsPickle(b *testing.B) {
	var buf bytes.Buffer
	var evs []Event
	for b.Loop() {
		buf.Reset()
		w, err := NewWriter(&buf, &Header{Producer: ProducerSynthetic})
		if err != nil {
			b.Fatal(err)
		}
		evs = transformerStream(rand.New(rand.NewPCG(1, 2)), w, 1<<19)
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sizes := pytorchSnapshotSizes(b, evs)
	n := float64(len(evs))
	b.ReportMetric(float64(buf.Len())/n, "fragsim-bytes/event")
	for _, k := range []string{"torch2.9-pickle-gzip6", "minimal-pickle-gzip9"} {
		b.ReportMetric(float64(sizes[k])/n, k+"-bytes/event")
		b.ReportMetric(float64(sizes[k])/float64(buf.Len()), k+"/fragsim")
	}
}
