package record

import (
	"syscall"
	"unsafe"
)

// foregroundTTY reports whether stdin is a terminal whose foreground
// process group is ours: then a Ctrl-C reaches the program directly.
func foregroundTTY() bool {
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, 0, uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp)))
	return errno == 0 && int(pgrp) == syscall.Getpgrp()
}
