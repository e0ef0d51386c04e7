// Package fakedev is a simulated device for allocator policy tests: predictable addresses, a capacity and a call log.
package fakedev

import (
	"fmt"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// Device implements driver.Device. Malloc hands out addresses from a bump
// pointer (Base, then each next address aligned to Align), never reusing
// one, so tests can state every address in advance. Mapped pages and
// cudaMalloc'd segments share the capacity.
type Device struct {
	Base     uint64 // first Malloc address; 0 means 1<<32
	Align    uint64 // alignment of Malloc addresses; 0 means 512
	Capacity uint64 // bytes the device can hold; 0 means no limit
	CapBytes uint64 // what Cap reports
	Capped   bool   // what Cap reports
	Total    uint64 // what TotalBytes reports

	Used uint64 // bytes held now (segments plus mapped pages)
	Peak uint64 // highest Used

	Mallocs, Frees, Maps, Unmaps, Refused int

	// Log records every call as "malloc SIZE -> ADDR", "free ADDR SIZE",
	// "refuse SIZE", "map ADDR SIZE", "unmap ADDR SIZE".
	Log []string
	// Errors records misuse: frees of unknown addresses or with a wrong size.
	Errors []string
	// NoLog turns Log off (for benchmarks).
	NoLog bool

	next   uint64
	vaNext uint64
	segs   map[uint64]uint64
}

func (d *Device) init() {
	if d.segs == nil {
		d.segs = make(map[uint64]uint64)
		if d.Base == 0 {
			d.Base = 1 << 32
		}
		if d.Align == 0 {
			d.Align = 512
		}
		d.next = d.Base
		d.vaNext = 1 << 48
	}
}

func (d *Device) log(s string) {
	if !d.NoLog {
		d.Log = append(d.Log, s)
	}
}

func (d *Device) fits(n uint64) bool {
	return (d.Capacity == 0 || d.Used+n <= d.Capacity) && (!d.Capped || d.Used+n <= d.CapBytes)
}

func (d *Device) take(n uint64) {
	d.Used += n
	d.Peak = max(d.Peak, d.Used)
}

// Malloc implements driver.Device.
func (d *Device) Malloc(sizeBytes uint64, _ trace.StreamID) (uint64, bool) {
	d.init()
	if sizeBytes == 0 || !d.fits(sizeBytes) {
		d.Refused++
		d.log(fmt.Sprintf("refuse %d", sizeBytes))
		return 0, false
	}
	addr := d.next
	d.next = (addr + sizeBytes + d.Align - 1) / d.Align * d.Align
	d.segs[addr] = sizeBytes
	d.take(sizeBytes)
	d.Mallocs++
	d.log(fmt.Sprintf("malloc %d -> %#x", sizeBytes, addr))
	return addr, true
}

// Free implements driver.Device.
func (d *Device) Free(addr, sizeBytes uint64) {
	d.init()
	got, ok := d.segs[addr]
	switch {
	case !ok:
		d.Errors = append(d.Errors, fmt.Sprintf("free of unknown segment %#x", addr))
		return
	case got != sizeBytes:
		d.Errors = append(d.Errors, fmt.Sprintf("free of %#x with size %d, allocated %d", addr, sizeBytes, got))
	}
	delete(d.segs, addr)
	d.Used -= got
	d.Frees++
	d.log(fmt.Sprintf("free %#x %d", addr, sizeBytes))
}

// Reserve implements driver.Device.
func (d *Device) Reserve(sizeBytes uint64, _ trace.StreamID) uint64 {
	d.init()
	base := d.vaNext
	d.vaNext += (sizeBytes + 1<<21 - 1) / (1 << 21) * (1 << 21)
	return base
}

// Map implements driver.Device.
func (d *Device) Map(addr, sizeBytes uint64) bool {
	d.init()
	if !d.fits(sizeBytes) {
		d.Refused++
		d.log(fmt.Sprintf("refuse %d", sizeBytes))
		return false
	}
	d.take(sizeBytes)
	d.Maps++
	d.log(fmt.Sprintf("map %#x %d", addr, sizeBytes))
	return true
}

// Unmap implements driver.Device.
func (d *Device) Unmap(addr, sizeBytes uint64) {
	d.init()
	if sizeBytes > d.Used {
		d.Errors = append(d.Errors, fmt.Sprintf("unmap of %d bytes at %#x with %d held", sizeBytes, addr, d.Used))
		return
	}
	d.Used -= sizeBytes
	d.Unmaps++
	d.log(fmt.Sprintf("unmap %#x %d", addr, sizeBytes))
}

// Cap implements driver.Device.
func (d *Device) Cap() (uint64, bool) { return d.CapBytes, d.Capped }

// TotalBytes implements driver.Device.
func (d *Device) TotalBytes() uint64 { return d.Total }

// Recorded implements driver.Device: a fake device has no recorded events.
func (d *Device) Recorded() []trace.Event { return nil }

// Live returns the number of segments held.
func (d *Device) Live() int { return len(d.segs) }

var _ driver.Device = (*Device)(nil)
