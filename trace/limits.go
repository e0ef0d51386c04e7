package trace

import (
	"fmt"
	"math"
)

// MaxSizeBytes bounds every size a trace holds when its header names no
// device memory (2^48 bytes, 256 TiB: far above any GPU's, far below what
// would overflow an allocator's rounding). With GPUTotalBytes set, the
// device's memory bounds the sizes instead, but for an OOM's request,
// which may ask for more than the device has.
const MaxSizeBytes = 1 << 48

// SizeBound returns the largest size an event of kind k may hold in a
// trace with header h (nil: no header): the device's memory when h names
// it, else MaxSizeBytes.
func (h *Header) SizeBound(k Kind) uint64 {
	if h != nil && h.GPUTotalBytes != 0 && k != KindOOM {
		return min(h.GPUTotalBytes, MaxSizeBytes)
	}
	return MaxSizeBytes
}

// CheckEvent reports a value of e that no trace with header h can hold:
// a size past SizeBound, a device_mem's free bytes above its total, or a
// set_fraction's fraction outside (0, 1] (NaN and infinities included).
func (h *Header) CheckEvent(e *Event) error {
	if b := h.SizeBound(e.Kind); e.SizeBytes > b {
		return fmt.Errorf("size %d is above %d, %s", e.SizeBytes, b, h.boundName(e.Kind))
	}
	switch e.Kind {
	case KindDeviceMem:
		if b := h.SizeBound(KindAlloc); e.Aux > MaxSizeBytes || e.SizeBytes > e.Aux {
			return fmt.Errorf("device memory of %d bytes free of %d total: want free at most total, and total at most %d", e.SizeBytes, e.Aux, b)
		}
	case KindSetFraction:
		if f := math.Float64frombits(e.Aux); !(f > 0 && f <= 1) {
			return fmt.Errorf("fraction %v is outside (0, 1]", f)
		}
	}
	return nil
}

// boundName says where the bound of kind k's sizes comes from.
func (h *Header) boundName(k Kind) string {
	if h != nil && h.GPUTotalBytes != 0 && k != KindOOM && h.GPUTotalBytes <= MaxSizeBytes {
		return "the device's memory (the header's gpu_total_bytes)"
	}
	return "the most a trace may hold (2^48)"
}

// Check reports a header value no trace can hold: a device memory above
// MaxSizeBytes, a memory fraction outside (0, 1] (0 is unknown), or an
// initial segment or block whose size passes the device's memory or whose
// end passes 2^64.
func (h *Header) Check() error {
	if h.GPUTotalBytes > MaxSizeBytes {
		return fmt.Errorf("gpu_total_bytes %d is above %d (2^48)", h.GPUTotalBytes, uint64(MaxSizeBytes))
	}
	if f := h.MemoryFraction; f != 0 && !(f > 0 && f <= 1) {
		return fmt.Errorf("memory_fraction %v is outside (0, 1]", f)
	}
	if h.Initial == nil {
		return nil
	}
	b := h.SizeBound(KindSegmentAlloc)
	for i, s := range h.Initial.Segments {
		if s.SizeBytes > b || s.Addr+s.SizeBytes < s.Addr {
			return fmt.Errorf("initial segment %d: %d bytes at %#x: want at most %d, %s, within the address space", i, s.SizeBytes, s.Addr, b, h.boundName(KindSegmentAlloc))
		}
		for j, bl := range s.Blocks {
			if bl.SizeBytes > s.SizeBytes || bl.RequestedBytes > bl.SizeBytes || bl.Addr+bl.SizeBytes < bl.Addr {
				return fmt.Errorf("initial segment %d, block %d: %d bytes (%d requested) at %#x in a segment of %d bytes", i, j, bl.SizeBytes, bl.RequestedBytes, bl.Addr, s.SizeBytes)
			}
		}
	}
	return nil
}
