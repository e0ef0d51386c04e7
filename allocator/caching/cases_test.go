package caching_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/fragsim/fragsim/allocator/caching"
	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/trace"
)

// textTrace encodes the text trace testdata/name (fragsim dump's form),
// with its header's producer replaced by producer when not empty.
func textTrace(t testing.TB, name, producer string) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := trace.NewTextReader(f)
	if err != nil {
		t.Fatal(err)
	}
	h := *tr.Header()
	if producer != "" {
		h.Producer = producer
	}
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.CopyTo(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// replayWith replays the encoded trace data under the caching allocator
// configured by conf ("" for the trace's recorded settings).
func replayWith(t testing.TB, data []byte, conf string, cfg replay.Config) *replay.Result {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	f := func(dev replay.Device, h *trace.Header) (replay.Policy, error) {
		c, err := caching.FromHeader(h)
		if err != nil {
			return nil, err
		}
		if conf != "" {
			if c, err = caching.ParseConf(conf); err != nil {
				return nil, err
			}
		}
		return caching.New(dev, c)
	}
	res, err := replay.Run(r, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestDeferredFree replays frees that complete after later requests, as
// PyTorch records a block freed after record_stream onto a busy stream:
// the block stays active, and unavailable to those requests, until its
// free_completed.
func TestDeferredFree(t *testing.T) {
	for _, producer := range []string{"", trace.ProducerSynthetic} {
		// deferred_free.txt: a 790,075-byte block freed, a 1,000-byte
		// alloc, then the first free completes.
		res := replayWith(t, textTrace(t, "deferred_free.txt", producer), "", replay.Config{})
		if res.PeakActiveBytes != 790528+1024 || res.DeviceAllocs != 1 {
			t.Errorf("producer %q: peak active %d, %d device allocs; want both blocks active at once (%d), in one segment",
				producer, res.PeakActiveBytes, res.DeviceAllocs, 790528+1024)
		}
	}
	// deferred_reuse.txt: a block freed while a request of its size is
	// served; freed at once, the request would take its address.
	res := replayWith(t, textTrace(t, "deferred_reuse.txt", ""), "", replay.Config{})
	fd := res.Fidelity
	if !fd.Checked || fd.Allocs != 4 || fd.AllocsAtRecordedAddress != 4 || fd.DeviceEventsMatched != 1 {
		t.Errorf("allocs at recorded address %d/%d, device events %d (checked %v): %s",
			fd.AllocsAtRecordedAddress, fd.Allocs, fd.DeviceEventsMatched, fd.Checked, fd.FirstMismatch)
	}
}
