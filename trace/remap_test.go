package trace

import (
	"bytes"
	"io"
	"testing"
)

// Events carried through a Remap name the same text and frames in the
// copy, and the copy defines only the strings its events name.
func TestRemap(t *testing.T) {
	var src bytes.Buffer
	w, err := NewWriter(&src, &Header{Producer: ProducerSynthetic})
	if err != nil {
		t.Fatal(err)
	}
	unused := w.String("never carried")
	for i, name := range []string{"alpha", "beta", "alpha"} {
		st := w.Stack([]Frame{{Func: w.String(name), File: w.String("m.py"), Line: uint32(i)}})
		if err := w.WriteEvent(Event{Kind: KindMarker, Marker: MarkerText, Text: w.String(name + "!"), Stack: st, TimeNS: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	w.WriteEvent(Event{Kind: KindMarker, Marker: MarkerText, Text: unused, TimeNS: 9})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(src.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var dst bytes.Buffer
	cw, err := NewWriter(&dst, r.Header())
	if err != nil {
		t.Fatal(err)
	}
	ids := NewRemap(r, cw)
	var want []Event
	for range 3 { // the last event, and the string only it names, stay behind
		e, err := r.ReadEvent()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, e)
		if err := cw.WriteEvent(ids.Event(e)); err != nil {
			t.Fatal(err)
		}
	}
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := NewReader(bytes.NewReader(dst.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		e, err := c.ReadEvent()
		if err == io.EOF {
			if i != len(want) {
				t.Fatalf("%d events copied, want %d", i, len(want))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if c.String(e.Text) != r.String(want[i].Text) {
			t.Errorf("event %d: text %q, want %q", i, c.String(e.Text), r.String(want[i].Text))
		}
		got, wf := c.Stack(e.Stack), r.Stack(want[i].Stack)
		if len(got) != 1 || c.String(got[0].Func) != r.String(wf[0].Func) || c.String(got[0].File) != r.String(wf[0].File) || got[0].Line != wf[0].Line {
			t.Errorf("event %d: stack %v, want %v", i, got, wf)
		}
	}
	for i := range c.NumStrings() {
		if c.String(StringID(i)) == "never carried" {
			t.Errorf("the copy defines a string no carried event names")
		}
	}
}
