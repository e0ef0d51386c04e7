//go:build !(linux || darwin || freebsd)

package pytorch

import "os"

// mapFile reports that files are read, not mapped, on this system.
func mapFile(f *os.File) (data []byte, unmap func(), ok bool) { return nil, nil, false }

// releaser returns nil: mapped input is not released early on this system.
func releaser(data []byte) func(off int) { return nil }
