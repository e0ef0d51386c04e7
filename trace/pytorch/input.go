package pytorch

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"
)

// Error is an import error; it names the input and, for decoding errors,
// the byte offset of the decompressed pickle.
type Error struct {
	Name string
	Err  error
}

func (e *Error) Error() string { return e.Name + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// ReadInput reads r whole, decompressing gzip or zstd when the data starts
// with their magic bytes.
func ReadInput(r io.Reader, opt Options) ([]byte, error) {
	limit := opt.MaxInputBytes
	if limit <= 0 {
		limit = 64 << 30
	}
	var hint int64 = 1 << 20
	switch x := r.(type) {
	case *os.File:
		if st, err := x.Stat(); err == nil && st.Mode().IsRegular() {
			hint = st.Size() + 1
		}
	case interface{ Len() int }:
		hint = int64(x.Len()) + 1
	}
	raw, err := readAll(&progressReader{r: r, p: opt.Progress}, min(hint, limit+1), limit)
	if err != nil {
		return nil, err
	}
	return decompress(raw, limit)
}

// decompress returns raw, or its decompression when it starts with the
// magic bytes of gzip or zstd.
func decompress(raw []byte, limit int64) ([]byte, error) {
	switch {
	case bytes.HasPrefix(raw, gzipMagic):
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		out, err := readAll(zr, min(int64(len(raw))*6, limit+1), limit)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return out, nil
	case bytes.HasPrefix(raw, zstdMagic):
		zr, err := zstd.NewReader(bytes.NewReader(raw), zstd.WithDecoderMaxMemory(uint64(limit)), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		out, err := readAll(zr, min(int64(len(raw))*6, limit+1), limit)
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return out, nil
	}
	return raw, nil
}

// readAll reads r to its end into a buffer of capacity hint, failing past limit.
func readAll(r io.Reader, hint, limit int64) ([]byte, error) {
	buf := make([]byte, 0, max(hint, 512))
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, fmt.Errorf("input exceeds %d bytes", limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("after %d bytes: %w", len(buf), err)
		}
	}
}

type progressReader struct {
	r    io.Reader
	p    func(string, int64, int64)
	n    int64
	next int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.p != nil && p.n >= p.next {
		p.p("read", p.n, -1)
		p.next = p.n + 16<<20
	}
	return n, err
}
