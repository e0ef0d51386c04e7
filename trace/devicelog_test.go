package trace

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
)

func TestDeviceLogParse(t *testing.T) {
	in := "# time device free total\n" +
		"300 0 900 1000\n" +
		"\n" +
		"100 1 950 1000\n" +
		"  200 0 1000 1000  \n"
	evs, err := ReadDeviceLog(strings.NewReader(in), "m.log")
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Kind: KindDeviceMem, TimeNS: 100, Device: 1, SizeBytes: 950, Aux: 1000},
		{Kind: KindDeviceMem, TimeNS: 200, Device: 0, SizeBytes: 1000, Aux: 1000},
		{Kind: KindDeviceMem, TimeNS: 300, Device: 0, SizeBytes: 900, Aux: 1000},
	}
	if len(evs) != len(want) {
		t.Fatalf("got %d samples, want %d", len(evs), len(want))
	}
	for i := range want {
		if evs[i] != want[i] {
			t.Errorf("sample %d: got %+v, want %+v", i, evs[i], want[i])
		}
	}
	// gzip'd, the same samples
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	io.WriteString(zw, in)
	zw.Close()
	zevs, err := ReadDeviceLog(&zb, "m.log.gz")
	if err != nil || len(zevs) != 3 || zevs[2] != want[2] {
		t.Fatalf("gzip'd: %v %v", zevs, err)
	}
}

func TestDeviceLogRefused(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1 0 5 10\n1 0 5\n", "m.log: line 2: 3 fields"},
		{"1 0 NaN 10\n", "m.log: line 1: free_bytes \"NaN\""},
		{"1 0 -5 10\n", "line 1: free_bytes \"-5\""},
		{"1 0 5.5 10\n", "line 1: free_bytes \"5.5\""},
		{"1 0 5 18446744073709551616\n", "line 1: total_bytes"},
		{"1 0 5 281474976710657\n", "line 1: total_bytes"},
		{"9223372036854775808 0 5 10\n", "line 1: time_ns"},
		{"1 2147483648 5 10\n", "line 1: device"},
		{"1 0 11 10\n", "line 1: free_bytes 11 is above total_bytes 10"},
		{"0 0 1 10\n", "line 1: time_ns 0"},
		{"5 0 0 0\n", "line 1: total_bytes 0"},
		{"1 0 1 10\n" + strings.Repeat("x", 5000) + "\n", "line 2: longer than"},
	} {
		_, err := ReadDeviceLog(strings.NewReader(c.in), "m.log")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error containing %q", c.in, err, c.want)
		}
	}
}

// A log of more samples than the budget, or a gzip'd one that inflates
// past its ratio, is refused while it is read: a 6 MB gzip'd log of one
// repeated line once died of a fatal out-of-memory error.
func TestDeviceLogBudgets(t *testing.T) {
	defer func(n int, f int64) { maxDeviceSamples, deviceLogFloor = n, f }(maxDeviceSamples, deviceLogFloor)
	maxDeviceSamples, deviceLogFloor = 1000, 64<<10
	line := "1764000000000000000 0 5 10\n"
	if _, err := ReadDeviceLog(strings.NewReader(strings.Repeat(line, 1000)), "m.log"); err != nil {
		t.Errorf("1000 samples: %v", err)
	}
	_, err := ReadDeviceLog(strings.NewReader(strings.Repeat(line, 1001)), "m.log")
	if err == nil || !strings.Contains(err.Error(), "m.log: line 1001: more than 1000 samples") {
		t.Errorf("1001 samples: %v", err)
	}
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	io.WriteString(zw, strings.Repeat("# a comment line that compresses well\n", 100_000))
	zw.Close()
	_, err = ReadDeviceLog(&zb, "m.log.gz")
	if err == nil || !strings.Contains(err.Error(), "decompression bomb") {
		t.Errorf("bomb: %v", err)
	}
}

// FitDeviceSamples keeps the samples inside the trace's window, counts the
// others, and refuses a device the trace does not have.
func TestFitDeviceSamples(t *testing.T) {
	s := func(t int64, d DeviceID) Event {
		return Event{Kind: KindDeviceMem, TimeNS: t, Device: d, SizeBytes: 1, Aux: 2}
	}
	samples := []Event{s(1, 0), s(100, 0), s(150, 1), s(200, 0), s(300, 1)}
	kept, fit, err := FitDeviceSamples(samples, "m.log", []DeviceID{0, 1}, 100, 200)
	if err != nil || len(kept) != 3 || kept[0].TimeNS != 100 || kept[2].TimeNS != 200 || fit != (DeviceFit{Before: 1, After: 1}) {
		t.Errorf("kept %v, %+v, %v", kept, fit, err)
	}
	_, _, err = FitDeviceSamples(samples, "m.log", []DeviceID{0}, 100, 200)
	if err == nil || !strings.Contains(err.Error(), "m.log: the sample at time_ns 150 names device 1") {
		t.Errorf("device 1 of a trace of device 0: %v", err)
	}
}

func TestMergeDeviceSamples(t *testing.T) {
	var src bytes.Buffer
	w, err := NewWriter(&src, &Header{Producer: "pytorch", GPUTotalBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	stk := w.Stack([]Frame{{Func: w.String("f"), File: w.String("a.py"), Line: 3}})
	evs := []Event{
		{Kind: KindAlloc, TimeNS: 100, Addr: 0x1000, SizeBytes: 512, Stack: stk},
		{Kind: KindFreeRequested, TimeNS: 0, Addr: 0x1000, SizeBytes: 512}, // untimed: takes 100
		{Kind: KindFreeCompleted, TimeNS: 300, Addr: 0x1000, SizeBytes: 512},
		{Kind: KindAlloc, TimeNS: 400, Addr: 0x2000, SizeBytes: 512},
	}
	for _, e := range evs {
		if err := w.WriteEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	samples := []Event{
		{Kind: KindDeviceMem, TimeNS: 50, SizeBytes: 10, Aux: 1 << 30},
		{Kind: KindDeviceMem, TimeNS: 150, SizeBytes: 20, Aux: 1 << 30},
		{Kind: KindDeviceMem, TimeNS: 300, SizeBytes: 30, Aux: 1 << 30},
		{Kind: KindDeviceMem, TimeNS: 450, SizeBytes: 40, Aux: 1 << 30},
	}
	srcBytes := bytes.Clone(src.Bytes())
	r, err := NewReader(&src)
	if err != nil {
		t.Fatal(err)
	}
	var dst bytes.Buffer
	dw, err := NewWriter(&dst, r.Header())
	if err != nil {
		t.Fatal(err)
	}
	n, err := MergeDeviceSamples(r, dw, samples)
	if err != nil || n != 3 {
		t.Fatalf("merged %d, %v", n, err)
	}
	if err := dw.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := NewReader(&dst)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		e, err := out.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		s := e.Kind.String()
		if e.Kind == KindDeviceMem {
			s += "@" + string(rune('0'+e.SizeBytes/10))
		}
		if e.Kind == KindAlloc && e.Addr == 0x1000 {
			fr := out.Stack(e.Stack)
			if len(fr) != 1 || out.String(fr[0].Func) != "f" || fr[0].Line != 3 {
				t.Errorf("alloc's stack not carried: %v", fr)
			}
		}
		got = append(got, s)
	}
	// the sample at 150 waits past the free_completed that follows a
	// free_requested; the one after the last event is left out
	want := "device_mem@1 alloc free_requested free_completed device_mem@2 device_mem@3 alloc"
	if g := strings.Join(got, " "); g != want {
		t.Errorf("merged order\n got %s\nwant %s", g, want)
	}

	// a sample no trace can hold (free above total) is refused before
	// anything is written
	r2, err := NewReader(bytes.NewReader(srcBytes))
	if err != nil {
		t.Fatal(err)
	}
	dw2, _ := NewWriter(io.Discard, r2.Header())
	if _, err := MergeDeviceSamples(r2, dw2, []Event{{Kind: KindDeviceMem, TimeNS: 1, SizeBytes: 5, Aux: 4}}); err == nil || !strings.Contains(err.Error(), "device sample 0") {
		t.Errorf("free above total: got %v", err)
	}
}
