//go:build darwin || freebsd

package pytorch

// populate does nothing: the mapping is faulted in as it is read.
func populate(data []byte) (done func()) { return func() {} }

// releaser returns nil: mapped input is not released early on this system.
func releaser(data []byte) func(off int) { return nil }
