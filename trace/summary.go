package trace

import (
	"io"
	"math"
	"slices"
)

// Summary describes a trace: what `fragsim info --json` prints. Its JSON
// keys are stable.
type Summary struct {
	Events int64 `json:"events"`
	// ByKind counts events by kind name; every known kind has a key.
	ByKind  map[string]int64 `json:"by_kind"`
	Devices []DeviceID       `json:"devices"`
	Streams []StreamID       `json:"streams"`
	// DurationNS is the span from the earliest to the latest event time,
	// FirstNS and LastNS.
	DurationNS    int64   `json:"duration_ns"`
	FirstNS       int64   `json:"first_ns"`
	LastNS        int64   `json:"last_ns"`
	FileBytes     int64   `json:"file_bytes"`
	BytesPerEvent float64 `json:"bytes_per_event"`
	Header        *Header `json:"header"`
}

// Summarize reads the rest of r and summarizes it. On a read error it
// returns the summary of the events read before it, and the error.
func Summarize(r *Reader) (*Summary, error) {
	s := &Summary{ByKind: map[string]int64{}, Devices: []DeviceID{}, Streams: []StreamID{}, Header: r.Header()}
	var counts [32]int64
	devs := map[DeviceID]bool{}
	streams := map[StreamID]bool{}
	var lastDev DeviceID
	var lastStream StreamID
	var minT, maxT int64
	var buf [512]Event
	var err error
	for {
		var n int
		n, err = r.ReadEvents(buf[:])
		if n == 0 {
			break
		}
		for i := range buf[:n] {
			e := &buf[i]
			counts[e.Kind&kindMask]++
			if s.Events == 0 || e.Device != lastDev {
				devs[e.Device] = true
				lastDev = e.Device
			}
			if s.Events == 0 || e.Stream != lastStream {
				streams[e.Stream] = true
				lastStream = e.Stream
			}
			if s.Events == 0 {
				minT, maxT = e.TimeNS, e.TimeNS
			}
			minT, maxT = min(minT, e.TimeNS), max(maxT, e.TimeNS)
			s.Events++
		}
	}
	if err == io.EOF {
		err = nil
	}
	for k := KindInvalid + 1; k < numKinds; k++ {
		s.ByKind[k.String()] = counts[k]
	}
	for d := range devs {
		s.Devices = append(s.Devices, d)
	}
	for st := range streams {
		s.Streams = append(s.Streams, st)
	}
	slices.Sort(s.Devices)
	slices.Sort(s.Streams)
	s.FirstNS, s.LastNS = minT, maxT
	s.DurationNS = int64(uint64(maxT) - uint64(minT))
	if s.DurationNS < 0 { // a span wider than int64 holds
		s.DurationNS = math.MaxInt64
	}
	s.FileBytes = r.Offset()
	if s.Events > 0 {
		s.BytesPerEvent = float64(s.FileBytes) / float64(s.Events)
	}
	return s, err
}
