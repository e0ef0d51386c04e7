package trace

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestTextValueChecks checks that undump refuses sizes past the device's
// memory or 2^48, fractions outside (0, 1], NaN and infinities, naming the
// line and the event, and takes the values at the bounds.
func TestTextValueChecks(t *testing.T) {
	noDev := TextMagic + "\nheader {}\n"
	dev := TextMagic + "\nheader {\"gpu_total_bytes\":85899345920}\n"
	bits := func(f float64) string { return fmt.Sprint(math.Float64bits(f)) }
	for _, tc := range []struct{ text, want string }{
		{noDev + "alloc t=1 addr=0x1000 size=281474976710657\n", "line 3: alloc (event 0): size 281474976710657 is above 281474976710656"},
		{noDev + "alloc t=1 addr=0x1000 size=512\nalloc t=2 addr=0x2000 size=18446744073709551615\n", "line 4: alloc (event 1): size 18446744073709551615 is above"},
		{noDev + "segment_alloc t=1 addr=0x1000 size=281474976710657\n", "line 3: segment_alloc (event 0): size"},
		{noDev + "oom t=1 size=281474976710657 aux=0\n", "line 3: oom (event 0): size"},
		{dev + "alloc t=1 addr=0x1000 size=85899345921\n", "line 3: alloc (event 0): size 85899345921 is above 85899345920, the device's memory"},
		{dev + "free_requested t=1 addr=0x1000 size=1099511627776\n", "line 3: free_requested (event 0): size"},
		{noDev + "set_fraction t=1 fraction=0\n", "line 3: set_fraction (event 0): fraction 0 is outside (0, 1]"},
		{noDev + "set_fraction t=1 fraction=-1\n", "line 3: set_fraction (event 0): fraction -1 is outside"},
		{noDev + "set_fraction t=1 fraction=2\n", "line 3: set_fraction (event 0): fraction 2 is outside"},
		{noDev + "set_fraction t=1 fraction=NaN\n", "line 3: set_fraction: bad fraction value \"NaN\""},
		{noDev + "set_fraction t=1 fraction=Inf\n", "line 3: set_fraction: bad fraction value \"Inf\""},
		{noDev + "set_fraction t=1 fraction=-Inf\n", "line 3: set_fraction: bad fraction value \"-Inf\""},
		{noDev + "set_fraction t=1 fraction=1e400\n", "line 3: set_fraction: bad fraction value \"1e400\""},
		{noDev + "set_fraction t=1 aux=" + bits(math.NaN()) + "\n", "line 3: set_fraction (event 0): fraction NaN is outside"},
		{noDev + "set_fraction t=1 aux=" + bits(math.Inf(1)) + "\n", "line 3: set_fraction (event 0): fraction +Inf is outside"},
		{noDev + "set_fraction t=1\n", "line 3: set_fraction (event 0): fraction 0 is outside"},
		{noDev + "device_mem t=1 size=10 aux=5\n", "line 3: device_mem (event 0): device memory of 10 bytes free of 5 total"},
		{noDev + "device_mem t=1 size=10 aux=281474976710657\n", "line 3: device_mem (event 0): device memory"},
		{TextMagic + "\nheader {\"gpu_total_bytes\":281474976710657}\n", "line 2: header: gpu_total_bytes 281474976710657 is above"},
		{TextMagic + "\nheader {\"memory_fraction\":2}\n", "line 2: header: memory_fraction 2 is outside (0, 1]"},
		{TextMagic + "\nheader {\"memory_fraction\":-0.5}\n", "line 2: header: memory_fraction -0.5 is outside"},
		{TextMagic + "\nheader {\"memory_fraction\":1e400}\n", "line 2: header JSON"},
		{TextMagic + "\nheader {\"initial\":{\"segments\":[{\"addr\":18446744073709551104,\"size\":1024,\"blocks\":[]}]}}\n", "line 2: header: initial segment 0"},
		{TextMagic + "\nheader {\"gpu_total_bytes\":1048576,\"initial\":{\"segments\":[{\"addr\":4096,\"size\":2097152,\"blocks\":[]}]}}\n", "line 2: header: initial segment 0: 2097152 bytes"},
		{TextMagic + "\nheader {\"initial\":{\"segments\":[{\"addr\":4096,\"size\":1024,\"blocks\":[{\"addr\":4096,\"size\":2048,\"state\":\"inactive\"}]}]}}\n", "line 2: header: initial segment 0, block 0"},
	} {
		_, err := ReadText(strings.NewReader(tc.text), discardSink{})
		var te *TextError
		if !errors.As(err, &te) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ReadText(%q) = %v, want an error starting %q", tc.text, err, tc.want)
		}
	}
	// The bounds themselves, and an OOM's request above the device.
	for _, text := range []string{
		noDev + "alloc t=1 addr=0x1000 size=281474976710656\n",
		dev + "alloc t=1 addr=0x1000 size=85899345920\n",
		dev + "oom t=1 size=171798691840 aux=0\n",
		noDev + "set_fraction t=1 fraction=1\nset_fraction t=2 fraction=5e-324\n",
		noDev + "device_mem t=1 size=5 aux=5\n",
		TextMagic + "\nheader {\"memory_fraction\":1,\"gpu_total_bytes\":281474976710656}\n",
	} {
		if _, err := ReadText(strings.NewReader(text), discardSink{}); err != nil {
			t.Errorf("ReadText(%q) = %v, want it read", text, err)
		}
	}
}

// TestHeaderChecked checks that the binary reader refuses a header no
// trace can hold, naming the file's header chunk.
func TestHeaderChecked(t *testing.T) {
	for _, h := range []Header{
		{GPUTotalBytes: MaxSizeBytes + 1},
		{MemoryFraction: 1.5},
		{MemoryFraction: -1},
		{Initial: &InitialState{Segments: []Segment{{Addr: math.MaxUint64 - 511, SizeBytes: 1024}}}},
	} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, &h)
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		_, err = NewReader(bytes.NewReader(buf.Bytes()))
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Chunk != 0 || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "header: ") {
			t.Errorf("header %+v: err = %v, want the header's error in chunk 0", h, err)
		}
	}
}
