//go:build !linux

package record

// foregroundTTY reports false where process groups are not checked.
func foregroundTTY() bool { return false }
