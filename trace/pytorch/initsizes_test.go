package pytorch

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// TestMidRunBlockEndShown checks the size of a block live at a mid-run
// trace's first event and freed within it (so the final segments do not
// give it): a request of 3 MiB that took a 3.5 MiB free block whole (a
// remainder of at most 1 MiB is not split off). The first allocation
// after it, while it is live, starts at its end, so the initial state
// holds it at 3.5 MiB and the free block after it at 16.5 MiB, where
// replay's best fit serves the recorded addresses. Without that
// allocation before its free, the block is its rounded request.
func TestMidRunBlockEndShown(t *testing.T) {
	const (
		M    = 1 << 20
		base = int64(0x7f0000000000)
	)
	finalSegs := []any{dict{
		[]string{"device", "address", "total_size", "stream", "segment_type", "is_expandable", "blocks"},
		[]any{0, base, 20 * M, 0, "large", nil, []any{
			dict{[]string{"address", "size", "requested_size", "state"}, []any{base, 20 * M, 0, "inactive"}},
		}},
	}}
	later := base + 3*M + M/2
	for _, tc := range []struct {
		name    string
		entries []any
		size    uint64 // of the block live at the first event
	}{
		{"allocation before its free", []any{
			entry("alloc", later, M, 1),
			entry("free_requested", later, M, 2), entry("free_completed", later, M, 2),
			entry("free_requested", base, 3*M, 3), entry("free_completed", base, 3*M, 3),
		}, 3*M + M/2},
		{"allocation after its free", []any{
			entry("free_requested", base, 3*M, 1), entry("free_completed", base, 3*M, 1),
			entry("alloc", later, M, 2),
			entry("free_requested", later, M, 3), entry("free_completed", later, M, 3),
		}, 3 * M},
	} {
		data := pickled(dict{[]string{"segments", "device_traces"}, []any{finalSegs, []any{tc.entries}}})
		s, err := Load(bytes.NewReader(data), "ring.pickle", Options{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		init := s.Header().Initial
		s.Close()
		if init == nil || len(init.Segments) != 1 {
			t.Fatalf("%s: initial state %+v", tc.name, init)
		}
		want := []trace.Block{
			{Addr: uint64(base), SizeBytes: tc.size, RequestedBytes: 3 * M, State: trace.BlockAllocated},
			{Addr: uint64(base) + tc.size, SizeBytes: 20*M - tc.size, State: trace.BlockInactive},
		}
		if got := init.Segments[0].Blocks; !reflect.DeepEqual(got, want) {
			t.Errorf("%s: blocks %+v, want %+v", tc.name, got, want)
		}
	}
}
