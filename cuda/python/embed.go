// Package python embeds the Python side of live recording: the
// sitecustomize module fragsim record puts on PYTHONPATH, the fragsim_hook
// installer and the fragsim_marker helper.
package python

import "embed"

// Files holds sitecustomize.py, fragsim_hook.py and fragsim_marker.py.
//
//go:embed sitecustomize.py fragsim_hook.py fragsim_marker.py
var Files embed.FS
