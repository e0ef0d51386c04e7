//go:build !(linux || darwin || freebsd)

package pytorch

import "os"

// mapFile reports that files are read, not mapped, on this system.
func mapFile(f *os.File) (data []byte, unmap func(), ok bool) { return nil, nil, false }

// releaser returns nil: mapped input is not released early on this system.
func releaser(data []byte) func(off int) { return nil }

// outBuf is memory for a decompressed input.
type outBuf struct{ b []byte }

func newOutBuf(n int) *outBuf { return &outBuf{b: make([]byte, n)} }

// grow makes o n bytes long, keeping its content.
func (o *outBuf) grow(n int) { o.b = append(o.b, make([]byte, n-len(o.b))...) }

// free releases o's memory; nothing may use it after.
func (o *outBuf) free() { o.b = nil }
