package pytorch

import "syscall"

// mapPopulate asks mmap to fault the whole mapping in at once.
const mapPopulate = syscall.MAP_POPULATE
