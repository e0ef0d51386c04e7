// Package pytorch imports PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot) into fragsim traces, without running any code the file holds.
//
// A snapshot is a pickled dict: the final `segments`, one ring buffer of
// trace entries per device in `device_traces`, `allocator_settings` and
// `external_annotations`. Load decodes it with the restricted decoder of
// package trace/pickle (no opcode that constructs objects or calls code is
// accepted), maps every trace action to a trace.Event, merges the devices and
// the annotations by time, and derives what the snapshot does not say:
//
//   - Initial state. The ring buffer may have dropped the run's first entries.
//     The allocator state at the first kept entry is rebuilt from the final
//     segments by undoing the trace backwards (as PyTorch's memory_viz does).
//     Blocks that were live at the first entry and freed later are not in the
//     final segments: their size is PyTorch's round_size of the request, widened
//     to the next boundary when a large-pool block could not have been split
//     (remainder of at most 1 MiB); where even that is uncertain (requests of at
//     least max_split_size) the header is marked approximate.
//
//   - empty_cache(). PyTorch does not trace it. A burst of segment_free /
//     segment_unmap entries that no OOM follows is taken for a user
//     empty_cache() unless it may be the malloc's own release: that needs the
//     next entry to be a segment_alloc/segment_map (a malloc that missed the
//     free lists) and either a memory cap the malloc would have crossed
//     (known through Options.MemoryCapBytes, or MemoryFraction and the GPU's
//     total), or garbage collection
//     (garbage_collection_threshold > 0, and a burst of whole large-pool
//     segments only). Without a known cap every other burst is an
//     empty_cache(). Limits: an empty_cache() that releases nothing leaves no
//     trace and cannot be seen; an empty_cache() directly followed by a malloc
//     that releases memory itself reads as one burst; a burst that may be GC is
//     not counted and the header says so.
//
// A snapshot that fragsim export --format memory_viz wrote carries a
// "fragsim" key (see extension.go): the trace header and the events no
// trace entry holds, each at its place. Its events and header then stand
// for what the import would infer, and the import gives back the trace
// replayed.
//
// Memory. The entries are converted as the decoder meets them, into 48-byte
// events. Up to about a million entries the events stay in memory; beyond,
// they go to a temporary file (Options.SpillDir; unnamed, so nothing is left
// behind), which the initial state (backwards), the empty_cache() inference,
// the summary and the write (the devices and annotations merged by time)
// read a block at a time: the import then holds the live allocator state,
// the decoder's own tables and fixed buffers, not the events. Stacks stay in
// the decoded pickle (the events refer to their frames lists).
package pytorch
