package trace

import (
	"encoding/binary"
	"fmt"
	"io"
	"maps"
)

// Reheader copies the trace in src to dst with its header changed by edit
// (which gets a copy of it): the format version, the tables, the events
// and the end chunk are copied byte for byte after the new header chunk,
// so that it costs a file copy, not a decode and an encode. The rest of
// src is not checked: it reads as it did.
func Reheader(dst io.Writer, src io.Reader, edit func(*Header)) error {
	r, err := NewReader(src)
	if err != nil {
		return err
	}
	defer r.Close()
	h := *r.hdr
	h.Tags = maps.Clone(h.Tags)
	edit(&h)
	if err := h.Check(); err != nil {
		return fmt.Errorf("trace: header: %w", err)
	}
	hj, err := marshalHeader(&h)
	if err != nil {
		return fmt.Errorf("trace: encoding header: %w", err)
	}
	if len(hj) > maxChunkRaw {
		return fmt.Errorf("trace: header of %d bytes exceeds the %d-byte limit", len(hj), maxChunkRaw)
	}
	const lv = 0 // the default level
	enc, err := getIdleEncoder(lv)
	if err != nil {
		return err
	}
	start := binary.AppendUvarint([]byte(Magic), uint64(r.version))
	frame, _ := frameChunk(start, nil, enc, chunkHeader, hj, r.version)
	encoders[lv].Put(enc)
	if _, err := dst.Write(frame); err != nil {
		return err
	}
	_, err = io.Copy(dst, r.br)
	return err
}
