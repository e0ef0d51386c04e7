package trace

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestUnmarshalHeaderMatchesEncodingJSON checks unmarshalHeader against
// json.Unmarshal: on random headers as the writer encodes them (which take
// the hand-parsed path), on edits of them that it must leave to
// encoding/json, and on a real trace's header. The results, and whether
// there is an error, must be the same.
func TestUnmarshalHeaderMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	states := []BlockState{BlockAllocated, BlockPendingFree, BlockInactive}
	var inputs [][]byte
	fast := 0
	for n := range 300 {
		h := Header{Producer: ProducerPyTorch, GPUName: "NVIDIA H200", AllocSettings: map[string]string{"initial": `{"segments":[`},
			Tags: map[string]string{"k": `,"initial":{"segments":[`}}
		if n%5 != 0 {
			h.Initial = &InitialState{Segments: []Segment{}}
			for range rng.IntN(6) {
				s := Segment{Device: DeviceID(rng.IntN(3) - 1), Stream: StreamID(rng.Uint64() >> uint(rng.IntN(64))),
					Addr: rng.Uint64(), SizeBytes: rng.Uint64() >> 20, Pool: []string{"small", "large", "small", "large", "small", "large", "small", "large", "<x>", "é"}[rng.IntN(10)],
					Expandable: rng.IntN(3) == 0, Blocks: []Block{}}
				if rng.IntN(20) == 0 {
					s.Blocks = nil
				}
				for range rng.IntN(5) {
					s.Blocks = append(s.Blocks, Block{Addr: rng.Uint64(), SizeBytes: uint64(rng.IntN(1 << 30)),
						RequestedBytes: uint64(rng.IntN(2) * rng.IntN(1<<30)), State: states[rng.IntN(3)]})
				}
				h.Initial.Segments = append(h.Initial.Segments, s)
			}
		}
		p, err := json.Marshal(&h)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, p)
		if i := bytes.LastIndex(p, []byte(initialKey)); i > 0 {
			if _, ok := parseSegments(p[i+len(initialKey)-1:]); ok {
				fast++
			}
		}
		// Edits: a space, another key, a number out of range or with a
		// fraction, a truncation, a second initial state, an escape.
		s := string(p)
		for _, e := range [][2]string{{`"size":`, `"size": `}, {`"state":`, `"State":`}, {`"addr":`, `"addr":-`},
			{`"addr":1`, `"addr":1.5`}, {`"device":0`, `"device":99999999999`}, {`"stream":`, `"stream":0`},
			{`inactive`, `in\u0061ctive`}, {`{"segments":[`, `{"segments":[],"x":[`}, {`"producer"`, `"initial":null,"producer"`}} {
			if strings.Contains(s, e[0]) {
				inputs = append(inputs, []byte(strings.Replace(s, e[0], e[1], 1)))
			}
		}
		inputs = append(inputs, p[:len(p)-1], append(append([]byte(nil), p...), ' '), append(append([]byte(nil), p...), 'x'))
	}
	if fast < 100 {
		t.Fatalf("only %d headers took the hand-parsed path", fast)
	}
	if data, err := os.ReadFile("../allocator/caching/testdata/real/ring.fst"); err == nil {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := json.Marshal(r.Header())
		if r.Header().Initial == nil || len(r.Header().Initial.Segments) < 100 {
			t.Fatal("ring.fst: no initial state")
		}
		inputs = append(inputs, p)
	}
	for i, p := range inputs {
		var want, got Header
		werr := json.Unmarshal(p, &want)
		gerr := unmarshalHeader(p, &got)
		if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
			t.Fatalf("input %d: error %v, encoding/json %v\n%s", i, gerr, werr, p)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("input %d: %+v\nencoding/json: %+v\n%s", i, got, want, p)
		}
	}
}

// TestMarshalHeaderMatchesEncodingJSON checks that marshalHeader writes
// json.Marshal's bytes: on random headers with and without an initial
// state (nil and empty segments and blocks, negative devices, the largest
// numbers, strings to escape in every field the hand path writes), and
// on a real trace's header.
func TestMarshalHeaderMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	strs := []string{"small", "large", "", "<x>", "a&b", `q"uote`, `back\slash`, "é", "\x01", "\xff", "\u2028", string(BlockAllocated), "inactive"}
	var headers []*Header
	for n := range 500 {
		h := &Header{Producer: ProducerPyTorch, GPUName: strs[rng.IntN(len(strs))], MemoryFraction: rng.Float64(),
			AllocSettings: map[string]string{"initial": `{"segments":[`}, Approximate: []string{"x"}[:rng.IntN(2)]}
		switch n % 7 {
		case 0: // no initial state
		case 1:
			h.Initial = &InitialState{}
		case 2:
			h.Initial = &InitialState{Segments: []Segment{}}
		default:
			h.Initial = &InitialState{Segments: []Segment{}}
			for range rng.IntN(6) {
				s := Segment{Device: DeviceID(rng.Int32() >> uint(rng.IntN(32))), Stream: StreamID(rng.Uint64() >> uint(rng.IntN(64))),
					Addr: rng.Uint64(), SizeBytes: rng.Uint64() >> uint(rng.IntN(64)), Pool: strs[rng.IntN(len(strs))],
					Expandable: rng.IntN(3) == 0}
				if rng.IntN(8) == 0 {
					s.Blocks = []Block{}
				}
				if rng.IntN(4) == 0 {
					s.Device = -s.Device
				}
				for range rng.IntN(5) {
					s.Blocks = append(s.Blocks, Block{Addr: rng.Uint64(), SizeBytes: rng.Uint64() >> uint(rng.IntN(64)),
						RequestedBytes: uint64(rng.IntN(2)) * rng.Uint64(), State: BlockState(strs[rng.IntN(len(strs))])})
				}
				h.Initial.Segments = append(h.Initial.Segments, s)
			}
		}
		headers = append(headers, h)
	}
	if data, err := os.ReadFile("../allocator/caching/testdata/real/ring.fst"); err == nil {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if r.Header().Initial == nil || len(r.Header().Initial.Segments) < 100 {
			t.Fatal("ring.fst: no initial state")
		}
		headers = append(headers, r.Header())
	}
	for i, h := range headers {
		want, werr := json.Marshal(h)
		got, gerr := marshalHeader(h)
		if werr != nil || gerr != nil || !bytes.Equal(got, want) {
			t.Fatalf("header %d: marshalHeader gave (%v)\n%s\njson.Marshal (%v)\n%s", i, gerr, got, werr, want)
		}
	}
}

// BenchmarkMarshalHeader encodes the header of the real ring.fst (an
// initial state of 114 segments) with marshalHeader, and with
// json.Marshal as "encoding/json".
func BenchmarkMarshalHeader(b *testing.B) {
	data, err := os.ReadFile("../allocator/caching/testdata/real/ring.fst")
	if err != nil {
		b.Skip(err)
	}
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		b.Fatal(err)
	}
	h := r.Header()
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			if _, err := marshalHeader(h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(h); err != nil {
				b.Fatal(err)
			}
		}
	})
}
