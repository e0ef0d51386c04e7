package trace

// Remap carries events from a Reader to a Writer: the string and stack
// IDs an event names in the reader become the writer's, each defined in
// the writer the first time an event names it (a cut or an edited copy
// of a trace defines only what it keeps).
type Remap struct {
	r   *Reader
	w   *Writer
	str map[StringID]StringID
	stk map[StackID]StackID
}

// NewRemap returns a Remap from r to w.
func NewRemap(r *Reader, w *Writer) *Remap {
	return &Remap{r: r, w: w, str: map[StringID]StringID{NoString: NoString}, stk: map[StackID]StackID{NoStack: NoStack}}
}

// String returns the writer's ID of the reader's string id.
func (m *Remap) String(id StringID) StringID {
	s, ok := m.str[id]
	if !ok {
		s = m.w.String(m.r.String(id))
		m.str[id] = s
	}
	return s
}

// Event returns e with its text and stack named by the writer's IDs.
func (m *Remap) Event(e Event) Event {
	e.Text = m.String(e.Text)
	s, ok := m.stk[e.Stack]
	if !ok {
		frames := append([]Frame(nil), m.r.Stack(e.Stack)...)
		for i := range frames {
			frames[i].Func, frames[i].File = m.String(frames[i].Func), m.String(frames[i].File)
		}
		s = m.w.Stack(frames)
		m.stk[e.Stack] = s
	}
	e.Stack = s
	return e
}
