package allocator

import (
	"github.com/fragsim/fragsim/allocator/caching"
	"github.com/fragsim/fragsim/replay/driver"
)

// TorchSettings returns the PyTorch caching allocator settings the policy
// p runs under, resolved (the trace's own or a --conf, with what its
// registry entry forces, such as expandable segments), when p is PyTorch's
// caching allocator; ok is false for any other policy. A snapshot written
// of a replay states them, so that its import replays under them.
func TorchSettings(p driver.Policy) (cfg caching.Config, ok bool) {
	a, ok := p.(*caching.Allocator)
	if !ok {
		return caching.Config{}, false
	}
	return a.Config(), true
}
