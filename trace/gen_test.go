package trace

import (
	"math"
	"math/rand/v2"
)

// randomTrace writes a random event stream with extreme values to s and
// returns the events written; its kinds are those of every format version.
func randomTrace(rng *rand.Rand, s Sink, n int) []Event {
	return randomTraceIn(rng, s, n, 1)
}

// randomTraceIn is randomTrace for the kinds of format version v, for a
// sink that writes that version.
func randomTraceIn(rng *rand.Rand, s Sink, n int, v int) []Event {
	nk := int(numKindsIn[v])
	extremes := []uint64{0, 1, 2, 511, 512, 1 << 20, 1<<63 - 1, 1 << 63, math.MaxUint64 - 1, math.MaxUint64}
	u64 := func() uint64 {
		switch rng.IntN(4) {
		case 0:
			return extremes[rng.IntN(len(extremes))]
		case 1:
			return rng.Uint64()
		default:
			return uint64(rng.IntN(1<<20)) * 512
		}
	}
	var strs []StringID
	var stks []StackID
	for range 1 + rng.IntN(5) {
		strs = append(strs, s.String(randString(rng)))
	}
	devs := []DeviceID{0, 1, 7, -1, math.MaxInt32, math.MinInt32}
	streams := []StreamID{0, 1, 0x7f0000001234, math.MaxUint64}
	var t int64
	evs := make([]Event, 0, n)
	for range n {
		if rng.IntN(50) == 0 {
			strs = append(strs, s.String(randString(rng)))
		}
		if rng.IntN(40) == 0 {
			fr := make([]Frame, rng.IntN(4))
			for i := range fr {
				fr[i] = Frame{Func: strs[rng.IntN(len(strs))], File: strs[rng.IntN(len(strs))], Line: rng.Uint32()}
			}
			stks = append(stks, s.Stack(fr))
		}
		switch rng.IntN(10) {
		case 0:
			t = int64(u64())
		case 1:
			t -= int64(rng.IntN(1 << 30))
		default:
			t += int64(rng.IntN(3000)) * 1000
		}
		e := Event{Kind: Kind(1 + rng.IntN(nk-1)), TimeNS: t}
		if rng.IntN(8) == 0 {
			e.Device = devs[rng.IntN(len(devs))]
			e.Stream = streams[rng.IntN(len(streams))]
		}
		f := kindFields[e.Kind]
		if rng.IntN(20) == 0 {
			f = allFields // fields outside the kind's spec
		}
		if f&fieldAddr != 0 {
			e.Addr = u64()
		}
		if f&fieldSize != 0 {
			e.SizeBytes = u64()
		}
		if f&fieldAux != 0 {
			e.Aux = u64()
		}
		if f&fieldText != 0 && rng.IntN(3) > 0 {
			e.Text = strs[rng.IntN(len(strs))]
		}
		if f&fieldMarker != 0 {
			e.Marker = MarkerKind(rng.IntN(int(numMarkerKinds)))
		}
		if len(stks) > 0 && rng.IntN(4) == 0 {
			e.Stack = stks[rng.IntN(len(stks))]
		}
		if err := s.WriteEvent(e); err != nil {
			panic(err)
		}
		evs = append(evs, e)
	}
	return evs
}

func randString(rng *rand.Rand) string {
	const alphabet = "abc xyz_.:/\"\\\n\t\x00é→"
	r := []rune(alphabet)
	b := make([]rune, 1+rng.IntN(12))
	for i := range b {
		b[i] = r[rng.IntN(len(r))]
	}
	return string(b)
}
