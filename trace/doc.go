// Package trace reads and writes fragsim's GPU allocation trace files.
//
// # Events
//
// A trace is a header (Header: producer, GPU, versions, allocator settings,
// optional initial state) and a sequence of Events: allocation requests,
// frees requested and completed, the device-level events of the allocator
// that ran when the trace was made (segment alloc/free, map/unmap), OOMs,
// empty-cache and memory-fraction calls, markers, samples of the device's
// free memory, and the routing of allocations to private pools (CUDA graph
// capture, torch.cuda.MemPool) and the pools' release. Strings (marker text,
// stack frames) and call stacks are defined once in tables and referenced by
// ID; ID 0 is the empty string and "no stack".
//
// Device events precede, in trace order, the request event that caused them
// (alloc, empty_cache, oom), as in PyTorch's own trace: a segment_alloc comes
// just before the alloc that needed the new segment.
//
// # Reading and writing
//
// NewWriter (or Create) writes a trace in self-contained chunks; its memory
// does not grow with the trace. NewReader (or Open) reads one as a stream,
// one chunk in memory at a time: ReadEvent until io.EOF, or ReadEvents for
// a batch at a time. Every error about the data matches ErrCorrupt and
// names the file, byte offset, chunk and event (FormatError). A file cut
// short, by a killed process say, reads up to its last whole chunk and then
// returns an error matching ErrTruncated that says what was lost:
//
//	run.fst: truncated at byte offset 123456 (chunk 7, after event 448000): 2100 bytes of a partial chunk lost (...)
//
// # File layout
//
// All integers are unsigned LEB128 varints (uvarint) unless marked; zigzag
// maps signed deltas to unsigned ones (0, -1, 1, -2 ... to 0, 1, 2, 3 ...).
//
//	file   := magic version chunk*
//	magic  := "FRAGSIM\x00"                      8 bytes
//	version:= uvarint                            format version, 1 to 3
//
//	chunk:
//	+------+---------+------------+--------+---------------------------+
//	| type | rawLen  | storedLen  | CRC    | payload (storedLen bytes) |
//	| 1 B  | uvarint | uvarint    | 4 B LE |                           |
//	+------+---------+------------+--------+---------------------------+
//
// The CRC is CRC-32C (Castagnoli) of the type, both lengths and the
// payload. The payload is zstd-compressed to rawLen bytes, or stored as is
// when the type's high bit (0x80) is set. Compressed, it is one or more
// zstd frames, which decode to the concatenation of theirs: the writer
// gives each column of an events payload its own frame (the column header
// with K, then T, A, S, M and R; none for an empty column), so that each
// column gets entropy tables of its own. Types, in the low 7 bits:
//
//	1 header  JSON of Header; exactly one, the first chunk
//	2 table   string and stack definitions, before the events that use them
//	3 events  events, in columns
//	4 end     totals; the last chunk, written by Writer.Close
//
// A file without its end chunk reads as truncated. No chunk exceeds 64 MiB
// before compression; readers check every length against its limit before
// allocating.
//
// A table payload is a sequence of records, each defining the next ID:
//
//	string := 0x01 uvarint(id) uvarint(len) bytes
//	stack  := 0x02 uvarint(id) uvarint(n) { uvarint(func) uvarint(file) uvarint(line) }*n
//
// An events payload holds n events column by column, so that zstd finds the
// repetition in each column:
//
//	+---+----------+----------+----------+----------+--------+--------+--------+--------+--------+
//	| n | timeUnit | addrUnit | sizeUnit | timeMode | len(T) | len(A) | len(S) | len(M) | len(R) |   uvarints
//	+---+----------+----------+----------+----------+--------+--------+--------+--------+--------+
//	| K: n type bytes | T: time | A: addresses | S: sizes | M: misc | R: ring references         |
//	+-----------------+---------+--------------+----------+---------+----------------------------+
//
// (timeMode, len(R) and R from version 2 on; version 1 has none of them.)
//
// A type byte holds the Kind in its low 5 bits and three flags:
//
//	0x20  device and stream changed: zigzag(device), stream follow in M
//	0x40  a stack ID follows in M
//	0x80  fields beyond the kind's spec follow: their mask is in M
//
// Every event has a time in T: zigzag(TimeNS - previous TimeNS) / timeUnit
// (version 2, timeMode 1, used when a delta of the chunk is negative), or
// (TimeNS - previous TimeNS) / timeUnit (version 2, timeMode 0). Which other
// fields an event carries is its kind's spec (the spec table in spec.go:
// alloc, frees and device events carry Addr and SizeBytes; oom SizeBytes
// and Aux; set_fraction Aux; marker Marker and Text; snapshot SizeBytes;
// device_mem SizeBytes and Aux; pool_begin, pool_end and pool_release Aux),
// plus the fields of the extra mask (addr 1, size 2, aux 4, text 8, marker
// 16), which a writer sets for non-zero fields outside the spec. SizeBytes
// goes to S as SizeBytes / sizeUnit; Aux, Text and Marker to M, in that
// order, after the device, stream, mask and stack. Addr goes to A as
// zigzag(Addr - previous Addr) / addrUnit, where in version 1 the previous
// Addr is that of the last event that encoded one, and in version 2 that of
// the last event of its size class that encoded one: sizes up to 1 MiB,
// up to 10 MiB, larger (PyTorch's small blocks, large blocks served from
// 20 MiB segments, larger ones), whose allocations and frees interleave.
// The units are the greatest common divisors the writer found in the chunk
// (PyTorch's times are whole microseconds, its blocks 512-byte aligned).
// Previous values, device and stream start at zero in every chunk, so each
// chunk decodes alone.
//
// Version 2 also changes the spec of the frees, whose address and size
// are, nearly always, those of a block allocated shortly before:
//
//   - free_completed encodes no address or size, and has those of the
//     event before it in the chunk (zero for the first): a free completes
//     the block whose free was just requested.
//   - Every alloc joins the chunk's allocation ring, of its latest 1023
//     allocs' addresses and sizes. free_requested encodes no address or
//     size, but uvarint(j) in R, and has those of the ring's (j+1)-th
//     latest alloc (j = 0: the chunk's last alloc before it); j must be
//     below the number of allocs before it in the chunk and below 1023.
//
// When they are not so, the writer sets addr and size in the event's extra
// mask and encodes both as any event would. A version 2 decoder decodes an
// event's size before its address (its size class picks the previous
// address).
//
// Version 3 is version 2 with four more kinds, encoded as version 2
// encodes any kind:
//
//	13 device_mem    a sample of the device's memory (cuMemGetInfo): SizeBytes
//	                 = its free bytes, Aux = its total bytes, Device set
//	14 pool_begin    allocations are routed to a private pool from here on
//	                 (CUDA graph capture, torch.cuda.MemPool): Stream = the
//	                 capture stream (0 for a MemPool routed by thread), Aux =
//	                 the pool's ID
//	15 pool_end      the routing begun by pool_begin ends (same fields)
//	16 pool_release  the private pool Aux is released (its graph freed)
//
// A pool's ID folds PyTorch's MempoolId_t (a, b) into one number: a when a
// is not zero, else b | 1<<63 (see PoolID).
//
// The end payload is uvarint(events) uvarint(chunks before it)
// uvarint(strings) uvarint(stacks), the string and stack counts including
// ID 0.
//
// # Text twin
//
// WriteText and ReadText convert a trace to and from text, one line each,
// for tests, hand edits and bug reports (fragsim dump and undump):
//
//	# fragsim text v1
//	header {"producer":"synthetic","gpu_name":"NVIDIA H100 80GB HBM3",...}
//	string 1 "forward"
//	string 2 "model.py"
//	stack 1 1:2:42
//	segment_alloc t=1764504000000001000 dev=0 stream=0x7f3c5a000400 addr=0x7f0000200000 size=20971520
//	alloc t=1764504000000001000 dev=0 stream=0x7f3c5a000400 addr=0x7f0000200000 size=12582912 stack=1
//	oom t=1764504000000020000 dev=0 stream=0x0 size=85899345920 aux=1073741824
//	set_fraction t=1764504000000022000 dev=0 stream=0x0 fraction=0.5
//	marker t=1764504000000024000 dev=0 stream=0x0 marker=step text=1
//	device_mem t=1764504000000025000 dev=0 stream=0x0 size=84825604096 aux=85045870592
//	pool_begin t=1764504000000026000 dev=0 stream=0x7f3c5a000400 aux=1
//
// A device_mem's size is the device's free bytes and its aux the total; a
// pool event's aux is the pool's ID.
//
// An event line has its kind, t, dev and stream, then the fields its kind
// carries (version 1's spec, whatever the file's version) and any other
// non-zero ones. A string or stack is defined (func:file:line per frame)
// just before its first use. Lines starting with # are comments.
// Converting a trace to text and back gives the same events, strings and
// stacks; syntax errors name their line.
//
// # Compatibility
//
// The format version selects the spec table. Later versions only append:
// new event kinds (version 3's), new fields (announced by the type byte's
// flags or the extra mask), new chunk types, new encodings of the columns
// (version 2's size classes, time modes, repeated frees and allocation
// ring); Kind values are never renumbered. A kind beyond a file's version
// is an error. A writer writes the newest version; a reader of version N
// reads every file of version N or lower, and rejects a newer file with an
// error matching ErrVersion. The header is JSON: fields may be
// added, and readers ignore keys they do not know.
package trace
