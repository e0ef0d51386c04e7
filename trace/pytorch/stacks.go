package pytorch

import (
	"math"
	"unsafe"

	"github.com/fragsim/fragsim/trace/pickle"
)

// frameRef is a frame of a streamed entry's stack: its file and function
// names as the decoded pickle's string Values (noFrames when absent) and
// its line.
type frameRef struct {
	file, name pickle.Value
	line       uint32
	nameFirst  bool // "name" came before "filename" in the frame's dict
}

// stackTable holds the stacks of a streamed snapshot's entries, each once:
// the streamer reads an entry's frames list when the decoder hands it
// over and gives the list to the decoder (pickle.Decoder.Take), so that
// the decoded pickle need not keep one list for each entry.
type stackTable struct {
	stacks [][]frameRef
	ids    map[string]uint32 // the frames' bytes -> stack id
	key    []frameRef

	kFile, kName, kLine uint32 // string indexes of the frame keys, once met
	file, name, line    bool
}

// intern returns the stack id of the frames list v: a list of dicts with
// "filename", "name" and "line" (other items and keys are skipped, as a
// trace of the whole pickle's would).
func (t *stackTable) intern(doc *pickle.Doc, v pickle.Value) uint32 {
	return t.internItems(doc, doc.Slice(v))
}

// internItems returns the stack id of a frames list of the items.
func (t *stackTable) internItems(doc *pickle.Doc, items []pickle.Value) uint32 {
	t.keys(doc)
	t.key = t.key[:0]
	for _, f := range items {
		t.frame(doc, f)
	}
	return t.id()
}

// keys looks up the frame keys until they are met.
func (t *stackTable) keys(doc *pickle.Doc) {
	if t.ids == nil {
		t.ids = map[string]uint32{}
	}
	if !t.file {
		t.kFile, t.file = doc.LookupStr("filename")
	}
	if !t.name {
		t.kName, t.name = doc.LookupStr("name")
	}
	if !t.line {
		t.kLine, t.line = doc.LookupStr("line")
	}
}

// frame appends the frame f to key (a list item that is not a dict is
// skipped).
func (t *stackTable) frame(doc *pickle.Doc, f pickle.Value) {
	if doc.Kind(f) != pickle.KindDict {
		return
	}
	fr := frameRef{file: noFrames, name: noFrames}
	ps := doc.PairSlice(f)
	for j := 0; j+1 < len(ps); j += 2 {
		k, x := ps[j], ps[j+1]
		id, ok := doc.StrID(k)
		switch {
		case !ok:
		case t.file && id == t.kFile:
			fr.file = x
			if _, ok := doc.StrID(x); !ok {
				fr.file = noFrames
			}
		case t.name && id == t.kName:
			fr.name = x
			if _, ok := doc.StrID(x); !ok {
				fr.name = noFrames
			} else if fr.file == noFrames {
				fr.nameFirst = true
			}
		case t.line && id == t.kLine:
			if n, ok := doc.Int(x); ok && n >= 0 && n <= math.MaxUint32 {
				fr.line = uint32(n)
			} else {
				fr.line = 0
			}
		}
	}
	t.key = append(t.key, fr)
}

// id returns the id of the stack in key, adding it when new.
func (t *stackTable) id() uint32 {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t.key))), uintptr(len(t.key))*unsafe.Sizeof(frameRef{}))
	if id, ok := t.ids[string(b)]; ok {
		return id
	}
	id := uint32(len(t.stacks))
	t.stacks = append(t.stacks, append([]frameRef(nil), t.key...))
	t.ids[string(b)] = id
	return id
}
