package replay

import "github.com/fragsim/fragsim/replay/driver"

// NewDevice returns a simulated GPU of total bytes (0: unlimited) for
// running a policy outside a replay, as the recording hook runs PyTorch's
// allocator beside its own: it lays segments out as a replay without
// recorded addresses does, refuses a segment over the memory fraction set
// with SetFraction (it implements driver.FractionSetter) or over total,
// and has no recorded events.
func NewDevice(total uint64) driver.Device {
	d := newDevice(nil, 0, total, 0, 0)
	d.compare = false
	return d
}

// ReservedBytes is the memory the policy holds from the device: its
// segments and mapped pages. NewDevice's device has it, for a caller that
// reads the policy's footprint while it runs (the recording hook's
// metrics).
func (d *device) ReservedBytes() uint64 { return d.reserved }
