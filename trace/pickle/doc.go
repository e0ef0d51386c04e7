// Package pickle decodes the data-only subset of Python's pickle format (protocols 0-5) that PyTorch memory snapshots use, refusing every opcode that would construct an object or call code.
//
// A Decoder reads a pickle held in memory (NewDecoder) or from an
// io.Reader (NewReaderDecoder), holding then a window of it whose size,
// not the pickle's, bounds what it buffers: a decompressed snapshot need
// not be held whole. Both give the same results and errors, at offsets of
// the whole pickle.
//
// Decoder.DecodeDoc decodes into a Doc: flat, pointer-free tables of values,
// containers and items addressed by Value, so that the millions of small
// dicts of a snapshot cost neither allocations nor garbage collection.
// Decoder.StreamEntries hands the trace entries of a memory snapshot to an
// EntryHandler as they are decoded instead of storing them.
// Decode (and Doc.ToAny) give the same data as a small Go representation:
//
//	None            nil
//	bool            bool
//	int             int64, or uint64 when it fits only unsigned (wider ints are an error)
//	float           float64
//	str, bytes      string (bytes are kept as their raw bytes)
//	list            *List (a pointer: pickles fill lists after memoizing them)
//	tuple           Tuple
//	dict            *Dict (insertion-ordered; int keys become their decimal text)
//
// Protocol 0's text opcodes (INT, LONG, FLOAT, STRING, UNICODE, GET, PUT)
// are read as Python reads them; its bytes, pickled through a call of
// _codecs.encode, are refused as any call is.
//
// What an opcode may make the decoder do is decided in one place, the
// opcode table (opTable): every path of the decoder decodes only the
// opcodes the table gives it, and the general one refuses the rest.
// Nothing is ever run: GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ,
// NEWOBJ_EX, EXT1/2/4, PERSID and BINPERSID are refused with an error naming the
// opcode and its byte offset (errors.Is(err, ErrUnsafe)). Every length and count
// is checked against the remaining input before anything is allocated, and
// what the decoder builds is held to a budget of 32 MiB and 3 bytes a byte
// of input (of the input decoded so far, from a reader; an error names the
// offset past it), so no input makes the
// decoder panic or allocate much more than the input's size.
package pickle
