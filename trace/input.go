package trace

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Inputs that can be read only once. A command may read its input more
// than once (compare replays a trace once per policy), and a pipe
// (`<(cat t.fst)`), a FIFO or standard input gives its bytes only once: a
// second read finds it empty, or waits forever on a FIFO. OpenInput reads
// such an input once, into a temporary file of its own (a spool), which
// the Input reads, and Spool hands out readers of it from its start, as
// many as needed. A spool has no name once made where the system allows it
// (Unix): nothing is left behind, however the process ends.

// DefaultMaxInputBytes is the most bytes OpenInput spools of an input
// that can be read only once, when InputOptions.MaxBytes is 0: 64 GiB, as
// much as an import reads of a snapshot.
const DefaultMaxInputBytes = 64 << 30

// InputOptions control OpenInput.
type InputOptions struct {
	// MaxBytes bounds a spool (0: DefaultMaxInputBytes): an input of more
	// is refused, with an error naming it, once it passes the bound.
	MaxBytes int64
	// Dir is where a spool is made ("": os.TempDir()).
	Dir string
	// Check, when set, is called with the first bytes of an input about
	// to be spooled (up to 64, fewer when it is shorter): an error refuses
	// the input before the rest is read. A regular file is not checked.
	Check func(head []byte) error
}

// Input is an input opened by OpenInput: it reads the input from its
// start.
type Input struct {
	*io.SectionReader
	file    *os.File
	own     bool   // file is ours to close (not standard input)
	spool   string // the spool's name, when the system kept it
	spooled bool
}

// File returns the regular file Input reads: the input itself, or its
// spool; it is closed by Close. Read it with ReadAt, or map it.
func (in *Input) File() *os.File { return in.file }

// Spooled reports whether the input was read once into a spool.
func (in *Input) Spooled() bool { return in.spooled }

// Reopen returns a reader of the input from its start, independent of
// in's (and of the others'), valid until in is closed. It is safe for
// concurrent use.
func (in *Input) Reopen() *io.SectionReader { return io.NewSectionReader(in.file, 0, in.Size()) }

// Close releases the input, and removes its spool.
func (in *Input) Close() error {
	if !in.own {
		return nil
	}
	err := in.file.Close()
	if in.spool != "" {
		os.Remove(in.spool)
	}
	return err
}

// OpenInput opens the input named path ("-" is standard input) to be read
// from its start. A regular file is opened as it is; anything else (a
// pipe, a FIFO, a device, standard input that is not a regular file) is
// read at once into a spool (see above), within opt.MaxBytes. A directory
// is an error.
func OpenInput(path string, opt InputOptions) (*Input, error) {
	if path == "-" {
		if st, err := os.Stdin.Stat(); err == nil && st.Mode().IsRegular() {
			if off, err := os.Stdin.Seek(0, io.SeekCurrent); err == nil && off == 0 {
				return &Input{SectionReader: io.NewSectionReader(os.Stdin, 0, st.Size()), file: os.Stdin}, nil
			}
		}
		return spoolInput(path, os.Stdin, opt)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	switch {
	case st.IsDir():
		f.Close()
		return nil, fmt.Errorf("%s: is a directory, not a file", path)
	case st.Mode().IsRegular():
		return &Input{SectionReader: io.NewSectionReader(f, 0, st.Size()), file: f, own: true}, nil
	}
	in, err := spoolInput(path, f, opt)
	f.Close()
	return in, err
}

// spoolInput reads r, the input named path, into a spool.
func spoolInput(path string, r io.Reader, opt InputOptions) (*Input, error) {
	f, kept, size, err := fill(path, r, opt)
	if err != nil {
		return nil, err
	}
	return &Input{SectionReader: io.NewSectionReader(f, 0, size), file: f, own: true, spool: kept, spooled: true}, nil
}

// fill copies r into a new spool, checking its first bytes with
// opt.Check and its size against opt.MaxBytes.
// kept is the spool's name when the system could not remove it at once.
func fill(path string, r io.Reader, opt InputOptions) (f *os.File, kept string, size int64, err error) {
	limit := opt.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxInputBytes
	}
	var head [64]byte
	n, err := io.ReadFull(r, head[:])
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, "", 0, fmt.Errorf("%s: %w", path, err)
	}
	if opt.Check != nil {
		if err := opt.Check(head[:n]); err != nil {
			return nil, "", 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	f, err = os.CreateTemp(opt.Dir, "fragsim-input-*.tmp")
	if err != nil {
		return nil, "", 0, fmt.Errorf("%s: it can be read only once, and no temporary copy could be made: %w (give a regular file)", path, err)
	}
	if os.Remove(f.Name()) != nil { // where the system allows, at once
		kept = f.Name()
	}
	fail := func(err error) (*os.File, string, int64, error) {
		f.Close()
		if kept != "" {
			os.Remove(kept)
		}
		return nil, "", 0, err
	}
	if _, err := f.Write(head[:n]); err != nil {
		return fail(fmt.Errorf("%s: copying it to a temporary file: %w", path, err))
	}
	size = int64(n)
	if n == len(head) {
		// One byte past the limit tells an input of more.
		m, err := io.Copy(f, io.LimitReader(r, limit-size+1))
		size += m
		if err != nil {
			return fail(fmt.Errorf("%s: after %d bytes: %w", path, size, err))
		}
		if size > limit {
			return fail(fmt.Errorf("%s: more than %d bytes, the most read from an input that can be read only once (a pipe); give a regular file", path, limit))
		}
	}
	return f, kept, size, nil
}

// IsTraceFile reports whether the file at path begins with a trace's
// magic (false when it cannot be read): a trace is opened as it is, other
// inputs are imported first.
func IsTraceFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, len(Magic))
	_, err = io.ReadFull(f, b)
	return err == nil && string(b) == Magic
}
