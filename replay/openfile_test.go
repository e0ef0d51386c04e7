package replay_test

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// A trace given as a FIFO (or a pipe, <(cat t.fst)) can be read only
// once: every call of its opener still reads it whole, concurrent calls
// included (compare replays one policy per goroutine). Once a FIFO hung
// the second open, and a pipe read a second time was "corrupt".
func TestOpenFileReadsPipesOnce(t *testing.T) {
	src := filepath.Join("..", "traces", "conformance", "plain_tiny.fst")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	want, err := trace.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := trace.Summarize(want.Reader)
	want.Close()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("no fifo: %v", err)
	}
	go func() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			f.Write(data)
			f.Close()
		}
	}()
	open := replay.OpenFile(p)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			r, c, err := open()
			if err != nil {
				t.Errorf("open %d: %v", i, err)
				return
			}
			defer c.Close()
			got, err := trace.Summarize(r)
			if err != nil || got.Events != sum.Events || got.LastNS != sum.LastNS {
				t.Errorf("open %d: %d events, %v; want %d", i, got.Events, err, sum.Events)
			}
		})
	}
	wg.Wait()
}
