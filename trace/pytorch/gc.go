package pytorch

import (
	"io"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
)

// TuneGC sets the garbage collector for the import of the file at path,
// and returns what restores its settings; a command calls the restore
// once the import's output is written (with the import's heap live,
// turning the collector back on starts a collection, which would hold
// the printing of the summary). It changes nothing when the collector is
// not at its defaults (GOGC or GOMEMLIMIT set them) or path is not a
// regular file.
//
// A plain pickle (first byte 0x80, PROTO: protocol 2 or later) of at most
// gcOffMaxBytes is imported with the collector off: such an import
// allocates a few times its input, most of it live to the end, and in a
// fresh process the collections while the heap is still small stall the
// decoder in mark assists, for little memory saved. A memory limit of
// gcOffLimitBytes stays: near it the collector runs. A larger plain
// pickle keeps the collector, under a soft memory limit (see
// memLimitPerByte). Compressed inputs, whose pickle may be far larger
// than the file, keep the collector, and with it the import's flat
// memory.
func TuneGC(path string) (restore func()) {
	none := func() {}
	if !gcDefaults() {
		return none
	}
	// Not even opened unless regular: a FIFO's writer would meet this open.
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return none
	}
	f, err := os.Open(path)
	if err != nil {
		return none
	}
	defer f.Close()
	st, err := f.Stat()
	var b [1]byte
	if err != nil || !st.Mode().IsRegular() {
		return none
	}
	if _, err := io.ReadFull(f, b[:]); err != nil || b[0] != 0x80 {
		return none
	}
	if st.Size() > gcOffMaxBytes {
		// The decoder holds what it builds to a budget proportional to the
		// input (trace/pickle); a soft memory limit a little above it keeps
		// the collector's slack from doubling that in a hostile file.
		limit := debug.SetMemoryLimit(int64(memLimitPerByte*st.Size()) + memLimitFloor)
		return func() { debug.SetMemoryLimit(limit) }
	}
	pct := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(gcOffLimitBytes)
	return func() {
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(pct)
	}
}

// gcDefaults reports whether the collector runs with its default
// settings: GOGC 100 and no memory limit.
func gcDefaults() bool {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return false
	}
	return s[0].Value.Uint64() == 100 && s[1].Value.Uint64() == math.MaxInt64
}

// gcOffMaxBytes is the largest plain pickle imported with the garbage
// collector off (its peak RSS is about the same either way),
// and gcOffLimitBytes the memory limit kept meanwhile.
const (
	gcOffMaxBytes   = 64 << 20
	gcOffLimitBytes = 1 << 30
)

// A larger plain pickle is imported under a soft memory limit of
// memLimitPerByte bytes per byte of input and memLimitFloor more: real
// snapshots' decoded tables take 1.2 to 2.2 bytes per byte, and the
// decoder refuses a pickle past 3.
const (
	memLimitPerByte = 4
	memLimitFloor   = 256 << 20
)
