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
//   - The output may not be one of the inputs (the same file, compared by
//     device and inode with os.SameFile, so another name or a hard link
//     is caught too).
//   - A symbolic link is written through: the file it points to is
//     replaced, and the link stays.
//   - A target that is not a regular file (a device such as /dev/null, a
//     fifo) is opened and written directly, with no temporary file and no
//     rename.
//   - While a temporary file is open, SIGINT or SIGTERM removes every open
//     temporary file and ends the process with exit code 130.
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
)

// File is an output file being written. Its methods Write, WriteAt, Seek,
// ReadAt, Stat and Fd are those of the underlying *os.File (the temporary
// file, or the target itself when it is written directly).
type File struct {
	*os.File
	path   string // the target, symbolic links resolved
	name   string // the name the caller gave, for messages
	temp   string // the temporary file; "" when the target is written directly
	closed bool
}

// Create opens an output for path. inputs are the files the command reads
// ("-" and names that do not exist are skipped): an output that is the
// same file as one of them is refused.
func Create(path string, inputs ...string) (*File, error) {
	if path == "" {
		return nil, errors.New("no output file named")
	}
	target, err := resolve(path)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(target)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if exists {
		if st.IsDir() {
			return nil, fmt.Errorf("%s: is a directory", path)
		}
		for _, in := range inputs {
			if in == "" || in == "-" {
				continue
			}
			if ist, err := os.Stat(in); err == nil && os.SameFile(ist, st) {
				return nil, fmt.Errorf("%s: the output is the input %s: write to another file", path, in)
			}
		}
		if !st.Mode().IsRegular() {
			f, err := os.OpenFile(target, os.O_WRONLY, 0)
			if err != nil {
				return nil, err
			}
			return &File{File: f, path: target, name: path}, nil
		}
	}
	f, temp, err := createTemp(target)
	if err != nil {
		return nil, err
	}
	if exists {
		// Keep the replaced file's permissions, as writing into it would.
		if err := f.Chmod(st.Mode().Perm()); err != nil {
			f.Close()
			os.Remove(temp)
			return nil, err
		}
	}
	out := &File{File: f, path: target, name: path, temp: temp}
	track(out)
	return out, nil
}

// Name returns the output's name as given to Create (not the temporary
// file's), for messages.
func (f *File) Name() string { return f.name }

// Commit completes the output: it syncs the temporary file to disk, closes
// it and renames it over the target (a direct target is only closed). On
// error the temporary file is removed and the previous target is left as it
// was. Commit after Commit or Abort returns an error.
func (f *File) Commit() error {
	if f.closed {
		return fmt.Errorf("%s: output already closed", f.name)
	}
	f.closed = true
	if f.temp == "" {
		return f.File.Close()
	}
	defer untrack(f)
	err := f.File.Sync()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.temp, f.path)
	}
	if err != nil {
		os.Remove(f.temp)
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
	err := f.File.Close()
	if f.temp != "" {
		untrack(f)
		if rerr := os.Remove(f.temp); err == nil && rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
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
