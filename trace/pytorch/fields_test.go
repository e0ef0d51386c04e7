package pytorch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// pickleWriter writes Python values as a protocol 2 pickle: map[string]any (keys in
// the order given by keys), []any, string, int64, *big.Int, float64, nil.
type pickleWriter struct{ bytes.Buffer }

type dict struct {
	keys []string
	vals []any
}

func (p *pickleWriter) value(v any) {
	switch x := v.(type) {
	case nil:
		p.WriteByte('N')
	case string:
		p.WriteByte('X')
		binary.Write(p, binary.LittleEndian, uint32(len(x)))
		p.WriteString(x)
	case int:
		p.value(big.NewInt(int64(x)))
	case int64:
		p.value(big.NewInt(x))
	case *big.Int:
		// LONG1: little-endian two's complement.
		b := x.Bytes()
		n := len(b) + 1
		tc := new(big.Int).Set(x)
		if x.Sign() < 0 {
			tc.Add(tc, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
		}
		out := make([]byte, n)
		tb := tc.Bytes()
		for i := range tb {
			out[i] = tb[len(tb)-1-i]
		}
		p.WriteByte(0x8a)
		p.WriteByte(byte(n))
		p.Write(out)
	case float64:
		p.WriteByte('G')
		binary.Write(p, binary.BigEndian, math.Float64bits(x))
	case []any:
		p.WriteString("](")
		for _, it := range x {
			p.value(it)
		}
		p.WriteByte('e')
	case dict:
		p.WriteString("}(")
		for i, k := range x.keys {
			p.value(k)
			p.value(x.vals[i])
		}
		p.WriteByte('u')
	}
}

func pickled(v any) []byte {
	var p pickleWriter
	p.WriteString("\x80\x02")
	p.value(v)
	p.WriteByte('.')
	return p.Bytes()
}

// entry is a trace entry dict of PyTorch's keys.
func entry(action string, addr, size, timeUS any) dict {
	return dict{[]string{"action", "addr", "size", "stream", "time_us"}, []any{action, addr, size, 0, timeUS}}
}

// snapshotOf is a snapshot of one device's entries and no segments.
func snapshotOf(entries ...any) []byte {
	return pickled(dict{[]string{"segments", "device_traces"}, []any{[]any{}, []any{entries}}})
}

// TestBadEntryFields checks that an entry's size, addr or time_us of the
// wrong type, negative, not an integer, above the device or overflowing
// is an error naming the file and the entry (device and index), never a
// zero or a wrapped value; and that the same entries with good values
// import.
func TestBadEntryFields(t *testing.T) {
	good := entry("alloc", 0x1000, 512, 1)
	two63 := new(big.Int).Lsh(big.NewInt(1), 63)
	cases := []struct {
		name string
		e    dict
		opt  Options
		want string
	}{
		{"size str", entry("alloc", 0x2000, "512", 2), Options{}, "device_traces[0][1]: size is a"},
		{"size None", entry("alloc", 0x2000, nil, 2), Options{}, "device_traces[0][1]: size is a"},
		{"size negative", entry("alloc", 0x2000, -512, 2), Options{}, "device_traces[0][1]: size is negative (-512)"},
		{"size NaN", entry("alloc", 0x2000, math.NaN(), 2), Options{}, "device_traces[0][1]: size is the float NaN"},
		{"size 2^64-1", entry("alloc", 0x2000, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(1)), 2), Options{}, "device_traces[0][1]: size 18446744073709551615 is above 281474976710656 bytes"},
		{"size 2^49", entry("alloc", 0x2000, int64(1)<<49, 2), Options{}, "device_traces[0][1]: size 562949953421312 is above"},
		{"size above the device", entry("alloc", 0x2000, 1<<30, 2), Options{MaxSizeBytes: 1 << 29}, "device_traces[0][1]: size 1073741824 is above 536870912 bytes"},
		{"addr str", entry("alloc", "0x1000", 512, 2), Options{}, "device_traces[0][1]: addr is a"},
		{"time_us 2^63-1", entry("alloc", 0x2000, 512, int64(math.MaxInt64)), Options{}, "device_traces[0][1]: time_us 9223372036854775807 overflows"},
		{"time_us 2^63", entry("alloc", 0x2000, 512, two63), Options{}, "device_traces[0][1]: time_us 9223372036854775808 overflows"},
		{"time_us str", entry("alloc", 0x2000, 512, "2"), Options{}, "device_traces[0][1]: time_us is a"},
	}
	for _, c := range cases {
		for _, workers := range []int{1, 4} {
			opt := c.opt
			opt.Workers = workers
			_, err := Load(bytes.NewReader(snapshotOf(good, c.e)), "bad.pickle", opt)
			if err == nil || !strings.HasPrefix(err.Error(), "bad.pickle: ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s (workers %d): %v; want an error with %q", c.name, workers, err, c.want)
			}
		}
	}
	fine := entry("alloc", 0x2000, float64(1024), int64(math.MaxInt64/1000))
	s, err := Load(bytes.NewReader(snapshotOf(good, fine)), "good.pickle", Options{MaxSizeBytes: 1 << 29})
	if err != nil {
		t.Fatalf("good entries: %v", err)
	}
	defer s.Close()
	if s.summary.Events != 2 || s.summary.LastNS != math.MaxInt64/1000*1000 {
		t.Errorf("good entries: %d events, last at %d ns", s.summary.Events, s.summary.LastNS)
	}
}

// TestLongStackNoted checks that a stack longer than a trace holds is
// noted in the header, naming its event and the frames dropped.
func TestLongStackNoted(t *testing.T) {
	n := trace.MaxStackFrames + 3616
	frames := make([]any, n)
	for i := range frames {
		frames[i] = dict{[]string{"filename", "line", "name"}, []any{"f.py", i, "g"}}
	}
	e := dict{[]string{"action", "addr", "size", "stream", "time_us", "frames"}, []any{"alloc", 0x2000, 512, 0, 2, frames}}
	s, err := Load(bytes.NewReader(snapshotOf(entry("alloc", 0x1000, 512, 1), e)), "long.pickle", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := fmt.Sprintf("device 0, event 1 (alloc at t=2000 ns): its stack of %d frames is cut to the first %d, the most a trace holds (3616 dropped)", n, trace.MaxStackFrames)
	if !slices.Contains(s.Header().Approximate, want) {
		t.Errorf("header notes %q; want %q", s.Header().Approximate, want)
	}
}

// stateSegments is a device's final state: a large segment of 20 MiB with
// an active 8 MiB block and the rest free, and a small one of 2 MiB with a
// 512-byte block.
func stateSegments() []any {
	const M = 1 << 20
	seg := func(addr, size int64, pool string, blocks ...any) dict {
		return dict{[]string{"device", "address", "total_size", "stream", "segment_type", "is_expandable", "blocks"},
			[]any{0, addr, size, 0, pool, nil, blocks}}
	}
	blk := func(addr, size int64, state string) dict {
		return dict{[]string{"address", "size", "requested_size", "state"}, []any{addr, size, size, state}}
	}
	return []any{
		seg(0x7f0000000000, 20*M, "large", blk(0x7f0000000000, 8*M, "active_allocated"), blk(0x7f0000000000+8*M, 12*M, "inactive")),
		seg(0x7f0002000000, 2*M, "small", blk(0x7f0002000000, 512, "active_allocated"), blk(0x7f0002000000+512, 2*M-512, "inactive")),
	}
}

// TestStateOnlySnapshot checks that a snapshot without trace entries (no
// device_traces, empty ones, or the bare segments list of
// torch.cuda.memory_snapshot()) imports its segments and blocks as the
// trace's initial state, and says it is state-only.
func TestStateOnlySnapshot(t *testing.T) {
	for name, data := range map[string][]byte{
		"no device_traces":    pickled(dict{[]string{"segments"}, []any{stateSegments()}}),
		"empty device_traces": pickled(dict{[]string{"segments", "device_traces"}, []any{stateSegments(), []any{[]any{}}}}),
		"segments list":       pickled(stateSegments()),
	} {
		s, err := Load(bytes.NewReader(data), "state.pickle", Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sum := s.Summary()
		init := s.Header().Initial
		if !sum.StateOnly || sum.Events != 0 || init == nil || len(init.Segments) != 2 || sum.InitialBlks != 4 ||
			sum.ReservedInit != 22<<20 {
			t.Errorf("%s: state-only %v, %d events, %d segments, %d blocks, %d reserved", name, sum.StateOnly, sum.Events,
				sum.InitialSegs, sum.InitialBlks, sum.ReservedInit)
		}
		s.Close()
	}
	// A snapshot with entries is not state-only.
	s, err := Load(bytes.NewReader(snapshotOf(entry("alloc", 0x1000, 512, 1))), "x.pickle", Options{})
	if err != nil || s.Summary().StateOnly {
		t.Fatalf("a snapshot with an entry: %v, state-only %v", err, s.Summary().StateOnly)
	}
	s.Close()
	// Neither entries nor segments: not a snapshot.
	if _, err := Load(bytes.NewReader(pickled(dict{[]string{"x"}, []any{1}})), "x.pickle", Options{}); err == nil ||
		!strings.Contains(err.Error(), "no device_traces") {
		t.Errorf("a dict of neither: %v", err)
	}
}
