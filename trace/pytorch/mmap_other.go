//go:build !(linux || darwin || freebsd)

package pytorch

import "os"

// mapFile reports that files are read, not mapped, on this system.
func mapFile(f *os.File) (data []byte, unmap func(), ok bool) { return nil, nil, false }
