// Package outfile writes a command's output file so that nothing is lost:
// the previous file stays whole until the new one is complete, and an
// error or an interrupt leaves no partial file behind.
//
// Every writer of an output file uses it:
//
//	f, err := outfile.Create(path, inputs...) // refuses an output that is one of the inputs
//	if err != nil { ... }
//	defer f.Abort()                  // removes the temporary file unless committed
//	... write to f ...
//	if err := f.Commit(); err != nil { ... } // fsync, then rename over path
//
// The rules:
//   - A regular file (or a path that does not exist yet) is written to a
//     temporary file of a unique name beside it (same directory, so the
//     rename cannot cross file systems), synced, and renamed over it by
//     Commit. Two writers of the same path never share a temporary file:
//     each produces a whole file, and the last rename wins.
//   - The output may not be one of the inputs: every file the command
//     reads is one (a trace, a snapshot, a device log, a plot's input),
//     and the same file is told by device and inode (os.SameFile), so
//     another name, a symbolic link or a hard link is caught too. Check
//     applies the rule before any work.
//   - A symbolic link is written through: the file it points to is
//     replaced, and the link stays.
//   - A target that is not a regular file (a device such as /dev/null, a
//     FIFO, a pipe) is opened and written directly, with no temporary file
//     and no rename. "-", /dev/stdout and /dev/fd/1 are standard output,
//     written directly and left open.
//   - While a temporary file (or a Scratch file) exists, SIGINT, SIGTERM,
//     SIGHUP or SIGQUIT removes every one and ends the process with exit
//     code 130.
//
// The package imports only the standard library, so that every layer of
// the project (trace-level importers, the recorder, the command line) may
// use it.
package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// File is an output file being written. Its methods Write, WriteAt, Seek,
// ReadAt, Stat and Fd are those of the underlying *os.File (the temporary
// file, or the target itself when it is written directly).
type File struct {
	*os.File
	path   string   // the target, symbolic links resolved
	name   string   // the name the caller gave, for messages
	temp   *cleanup // the temporary file; nil when the target is written directly
	keep   bool     // the target is standard output: left open
	closed bool
}

// ErrNoName is the error of an output path that is empty.
var ErrNoName = errors.New("no output file named")

// SameFileError is the error of an output that is one of the inputs.
type SameFileError struct {
	Output, Input string
}

func (e *SameFileError) Error() string {
	if e.Output == e.Input {
		return fmt.Sprintf("%s: the output is the input: write to another file", e.Output)
	}
	return fmt.Sprintf("%s: the output is the input %s: write to another file", e.Output, e.Input)
}

// IsStdout reports whether path names standard output: "-", /dev/stdout,
// /dev/fd/1 or /proc/self/fd/1.
func IsStdout(path string) bool {
	switch path {
	case "-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1":
		return true
	}
	return false
}

// Check applies Create's rules to path without creating anything: an
// empty path, a directory, a new file in a directory that does not exist,
// and an output that is the same file as one of inputs are refused. inputs are the files the command reads: "-" is
// standard input, and "" and names that do not exist are skipped. A
// command calls it before its work, so that a refusal costs nothing.
func Check(path string, inputs ...string) error {
	if path == "" {
		return ErrNoName
	}
	var st os.FileInfo
	var err error
	if IsStdout(path) {
		st, err = os.Stdout.Stat()
	} else {
		st, err = os.Stat(path) // through every link
	}
	if errors.Is(err, fs.ErrNotExist) {
		// A new file: its directory must be there, or the work would be
		// done for nothing.
		target, err := resolve(path)
		if err != nil {
			return err
		}
		if dst, err := os.Stat(filepath.Dir(target)); err != nil || !dst.IsDir() {
			if err == nil {
				err = syscall.ENOTDIR
			}
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return fmt.Errorf("cannot create %s: %w", target, err)
		}
		return nil
	}
	if err != nil {
		return nil // Create reports it
	}
	if st.IsDir() {
		return fmt.Errorf("%s: is a directory", path)
	}
	if st.Mode()&fs.ModeCharDevice != 0 {
		return nil // a device such as /dev/null destroys no input
	}
	for _, in := range inputs {
		var ist os.FileInfo
		switch in {
		case "":
			continue
		case "-":
			ist, err = os.Stdin.Stat()
		default:
			ist, err = os.Stat(in)
		}
		if err == nil && os.SameFile(ist, st) {
			return &SameFileError{Output: path, Input: in}
		}
	}
	return nil
}

// Dir returns the directory where a command writing the output path
// should put its other temporary files (spools, scratch traces): the
// directory of the file that will be renamed into place, on the same file
// system, or "" (os.TempDir()) when path is written directly (standard
// output, a device, a FIFO).
func Dir(path string) string {
	if IsStdout(path) {
		return ""
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return ""
	}
	target, err := resolve(path)
	if err != nil {
		return ""
	}
	return filepath.Dir(target)
}

// Create opens an output for path. inputs are the files the command reads
// ("-" is standard input; "" and names that do not exist are skipped): an
// output that is the same file as one of them is refused (see Check).
func Create(path string, inputs ...string) (*File, error) {
	if err := Check(path, inputs...); err != nil {
		return nil, err
	}
	if IsStdout(path) {
		return &File{File: os.Stdout, path: path, name: path, keep: true}, nil
	}
	st, err := os.Stat(path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if exists && !st.Mode().IsRegular() {
		// A device, a FIFO, a pipe through /dev/fd: written as it is.
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		return &File{File: f, path: path, name: path}, nil
	}
	target, err := resolve(path)
	if err != nil {
		return nil, err
	}
	c := &cleanup{}
	err = track(c, func() error {
		f, temp, err := createTemp(target)
		if err != nil {
			return err
		}
		if exists {
			// Keep the replaced file's permissions, as writing into it would.
			if err := f.Chmod(st.Mode().Perm()); err != nil {
				f.Close()
				os.Remove(temp)
				return err
			}
		}
		c.f, c.path = f, temp
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &File{File: c.f, path: target, name: path, temp: c}, nil
}

// Name returns the output's name as given to Create (not the temporary
// file's), for messages.
func (f *File) Name() string { return f.name }

// Direct reports whether the output is written directly (standard output,
// a device, a FIFO): there is no earlier file to keep, and what was
// written before an error has been read already.
func (f *File) Direct() bool { return f.temp == nil }

// Commit completes the output: it syncs the temporary file to disk, closes
// it and renames it over the target (a direct target is only closed;
// standard output is left open). On error the temporary file is removed
// and the previous target is left as it was. Commit after Commit or Abort
// returns an error.
func (f *File) Commit() error {
	if f.closed {
		return fmt.Errorf("%s: output already closed", f.name)
	}
	f.closed = true
	if f.keep {
		return nil
	}
	if f.temp == nil {
		return f.File.Close()
	}
	defer untrack(f.temp)
	err := f.File.Sync()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.temp.path, f.path)
	}
	if err != nil {
		os.Remove(f.temp.path)
		return fmt.Errorf("%s: %w", f.name, err)
	}
	syncDir(filepath.Dir(f.path))
	return nil
}

// Abort drops the output: it closes and removes the temporary file, and
// leaves the previous target as it was (a direct target is only closed).
// It does nothing after Commit, so that it can be deferred.
func (f *File) Abort() error {
	if f.closed {
		return nil
	}
	f.closed = true
	if f.keep {
		return nil
	}
	err := f.File.Close()
	if f.temp != nil {
		untrack(f.temp)
		if rerr := os.Remove(f.temp.path); err == nil && rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = rerr
		}
	}
	return err
}

// Close commits the output: it is Commit, so that a File can stand where an
// io.WriteCloser is closed on success. Call Abort on failure.
func (f *File) Close() error { return f.Commit() }

// Write writes one output file whole: Create, then write, then Commit;
// on an error from write the previous file is left as it was.
func Write(path string, inputs []string, write func(io.Writer) error) error {
	f, err := Create(path, inputs...)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := write(f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Commit()
}

// Scratch is a temporary file of the command's own (an intermediate
// trace): it is removed by Remove, and, like an output's temporary file,
// when the process is interrupted.
type Scratch struct {
	c *cleanup
}

// NewScratch creates an empty scratch file in dir ("": os.TempDir()),
// named after pattern as os.CreateTemp names its files.
func NewScratch(dir, pattern string) (*Scratch, error) {
	c := &cleanup{}
	err := track(c, func() error {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			os.Remove(f.Name())
			return err
		}
		c.path = f.Name()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Scratch{c: c}, nil
}

// Path returns the scratch file's name.
func (s *Scratch) Path() string { return s.c.path }

// Remove removes the scratch file (a scratch directory with what it
// holds). It may be called more than once.
func (s *Scratch) Remove() {
	untrack(s.c)
	s.c.remove()
}

// NewScratchDir creates an empty scratch directory in dir ("":
// os.TempDir()), named after pattern as os.MkdirTemp names them: it is
// removed with everything in it by Remove, and when the process is
// interrupted. For the scratch of a library that makes its own files.
func NewScratchDir(dir, pattern string) (*Scratch, error) {
	c := &cleanup{dir: true}
	err := track(c, func() error {
		p, err := os.MkdirTemp(dir, pattern)
		c.path = p
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Scratch{c: c}, nil
}

// resolve follows the symbolic links of path to the file they point to
// (which need not exist yet).
func resolve(path string) (string, error) {
	p := path
	for range 64 {
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return p, nil
		}
		if err != nil {
			return "", err
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}
		link, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(p), link)
		}
		p = link
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", path)
}

// createTemp creates a new file of a unique name beside target, with the
// permissions os.Create gives (0666 less the umask).
func createTemp(target string) (*os.File, string, error) {
	dir, base := filepath.Split(target)
	for range 100 {
		name := filepath.Join(dir, "."+base+"."+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(rand.Uint64()>>32, 36)+".tmp")
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			// Name the target, not the temporary file.
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, "", fmt.Errorf("cannot create %s: %w", target, err)
		}
		return f, name, nil
	}
	return nil, "", fmt.Errorf("%s: cannot create a temporary file beside it", target)
}

// syncDir makes a rename in dir durable. Not every system can sync a
// directory; the rename stands either way.
func syncDir(dir string) {
	if dir == "" {
		dir = "."
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
