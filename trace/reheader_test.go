package trace

import (
	"bytes"
	"testing"
)

// TestReheader changes a trace's header tags: the copy reads with the new
// header and every event of the original, and the original's header is
// untouched.
func TestReheader(t *testing.T) {
	for _, v := range []int{2, Version} {
		data, evs, _ := writeRandom(t, 7, 20000, formatVersion(v))
		var out bytes.Buffer
		err := Reheader(&out, bytes.NewReader(data), func(h *Header) {
			h.Tags["rank"] = "1"
			h.Tags["device"] = "1"
		})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewReader(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		h := r.Header()
		r.Close()
		if r.Version() != v || h.Tags["rank"] != "1" || h.Tags["device"] != "1" || h.Tags["seed"] != "1" || h.GPUName != "Test GPU" {
			t.Errorf("version %d, header %+v: want version %d, the tags added and the rest kept", r.Version(), h, v)
		}
		if n, diff, err := readBack(out.Bytes(), evs); err != nil || diff != "" || n != len(evs) {
			t.Errorf("copy reads %d events (%s), %v; want the %d written", n, diff, err, len(evs))
		}
		r, _ = NewReader(bytes.NewReader(data))
		if _, ok := r.Header().Tags["rank"]; ok {
			t.Error("the original's header changed")
		}
		r.Close()
	}
	if err := Reheader(&bytes.Buffer{}, bytes.NewReader([]byte("not a trace")), func(*Header) {}); err == nil {
		t.Error("a file that is no trace was copied")
	}
}
