package pytorch

import (
	"runtime"

	"github.com/fragsim/fragsim/trace"
	"github.com/fragsim/fragsim/trace/pickle"
)

// Options control an import.
type Options struct {
	// NoInferEmptyCache turns off the inference of empty_cache() calls.
	NoInferEmptyCache bool
	// MemoryCapBytes is the per-process memory cap the run had (fraction ×
	// device total), when known: it lets release bursts that came from a
	// malloc's retry be told apart from empty_cache(). 0 means unknown,
	// unless MemoryFraction and Meta.GPUTotalBytes give it (see capBytes).
	MemoryCapBytes uint64
	// MemoryFraction, when set, is stored in the header.
	MemoryFraction float64
	// Meta holds what the snapshot cannot say (GPU, its total memory,
	// versions, tags); its non-zero fields are merged into the header.
	Meta *trace.Header
	// Progress, when set, is called now and then with the phase
	// ("read", "decode", "convert", "write") and how far it is.
	Progress func(phase string, done, total int64)
	// MaxInputBytes bounds the decompressed pickle size (0: 64 GiB).
	MaxInputBytes int64
	// MaxSizeBytes is the largest size a trace entry may have: the
	// device's memory when known (0: DefaultMaxSizeBytes). A larger one
	// is an error naming the entry.
	MaxSizeBytes uint64
	// MaxRatio bounds what a gzip'd or zstd'd snapshot decompresses to,
	// in times its compressed size, beyond a floor of 64 MiB (0: 100).
	// Past it the input is refused as a decompression bomb.
	MaxRatio int64
	// StreamFromBytes is the pickle size from which a gzip'd or zstd'd
	// snapshot is decoded while it is decompressed, in a window of 1 MiB
	// or so, rather than decompressed whole first and decoded on the
	// workers (0: 32 MiB; 1: every one). A snapshot whose size its
	// header does not give is streamed. The result is the same either way.
	StreamFromBytes int64

	// SpillDir is where a snapshot of more than a million or so trace
	// entries keeps its events while it is converted and written, in a
	// temporary file removed at once (where the system allows) or at the
	// end; "": os.TempDir(), or the output's directory for ImportFile.
	SpillDir string

	// Workers is how many goroutines decode the trace entries ahead of
	// the pickle decoder: 0 means one per CPU (runtime.GOMAXPROCS), 1
	// none. The result is the same either way.
	Workers int

	// mapped is set when the input given to loadMapped is a file's
	// mapping.
	mapped bool

	// tune overrides how the workers share the decode (tests).
	tune *pickle.ParallelTuning

	// prepare, when set, is called once the decoder has gone through
	// prepareShare of a streamed pickle (see ImportFile), with the
	// entries it expects in all.
	prepare func(events int)
}

// capBytes is the run's memory cap: MemoryCapBytes, or PyTorch's cap of
// a memory fraction below 1 on a device of known size, (size_t)(fraction
// × (double)totalGlobalMem); 0 when not known.
func (o *Options) capBytes() uint64 {
	if o.MemoryCapBytes > 0 {
		return o.MemoryCapBytes
	}
	if f := o.MemoryFraction; f > 0 && f < 1 && o.Meta != nil && o.Meta.GPUTotalBytes > 0 {
		return uint64(f * float64(o.Meta.GPUTotalBytes))
	}
	return 0
}

// parallelMin is the events of a device from which its initial state is
// rebuilt, and its events converted, on several goroutines.
var parallelMin = 1 << 14

// workers returns how many goroutines the conversion of a device of n
// events may use: Options.Workers (or one per core), at most 16, and at
// most one per partMin events.
func (c *converter) workers(n int) int {
	k := runtime.GOMAXPROCS(0)
	if c.opt.Workers > 0 {
		k = c.opt.Workers
	}
	return min(k, 16, max(n/partMin, 1))
}

// partMin is the fewest events a goroutine of the conversion takes.
var partMin = 1 << 13

// prepareShare is how far through the pickle the decoder is when the
// trace writer starts being prepared: not at once, so that the decoder's
// own tables are faulted in first on the other core.
const prepareShare = 1.0 / 3

// chunkEvents returns the events of a chunk of an imported trace of n
// events: the writer's default, or fewer, down to an eighth of it, so
// that a trace of fewer than 16 default chunks is still cut into about
// 16, compressed at once on as many cores. A trace's chunks depend on its
// events alone, so an import writes the same bytes on every machine.
// Smaller chunks compress a little less well: an eighth is the floor.
func chunkEvents(n int) int {
	return min(max(n/16, trace.DefaultChunkEvents/8), trace.DefaultChunkEvents)
}

// maxPrepared is how many zstd encoders ImportFile has made during the
// decode, at most (about 1.5 MiB each); a compressor without one makes
// its own, faulting in its match tables while compressing its first
// chunk.
const maxPrepared = 8

// WriterOptions returns the options of the trace writer that ImportFile
// writes s with: its chunks' size (in events alone, so that the writer
// need not measure the events before compressing them), and their
// compression on every core.
func (s *Snapshot) WriterOptions() []trace.WriterOption {
	opts := []trace.WriterOption{trace.ChunkEvents(chunkEvents(s.summary.Events)), trace.ChunksByEvents()}
	if n := compressors(s.summary.Events); n > 1 {
		opts = append(opts, trace.Concurrency(n))
	}
	return append(opts, level(s.summary.Events)...)
}

// level returns the writer's compression level option for an imported
// trace of n events: zstd's fastest from fastMin events, else its
// default.
func level(n int) []trace.WriterOption {
	if n >= fastMin {
		return []trace.WriterOption{trace.FastCompression()}
	}
	return nil
}

// fastMin is the events from which an imported trace is compressed at
// zstd's fastest level (trace.FastCompression): then it has 2 chunks or
// more (see chunkEvents), an encoder for each on as many cores, and each
// new encoder's match tables are fresh memory to fault in (1.25 MiB at
// the default level, 256 KiB at the fastest). The traces are a few
// percent larger; a trace of one chunk, which gains nothing in time and
// would lose more in size, keeps the default.
const fastMin = 2 * trace.DefaultChunkEvents / 8

// compressors returns how many goroutines compress the chunks of an
// imported trace of n events: one per core, at most one per chunk.
func compressors(n int) int {
	c := chunkEvents(n)
	return max(min(runtime.GOMAXPROCS(0), (n+c-1)/c), 1)
}

// DefaultMaxSizeBytes is the largest size a trace entry may have when the
// device's memory is not known: 2^48 bytes (256 TiB).
const DefaultMaxSizeBytes = 1 << 48

// maxSize returns the largest size a trace entry may have.
func (o *Options) maxSize() uint64 {
	if o.MaxSizeBytes > 0 {
		return o.MaxSizeBytes
	}
	return DefaultMaxSizeBytes
}

// maxSize returns the largest size a trace entry may have.
func (c *converter) maxSize() uint64 { return c.opt.maxSize() }
