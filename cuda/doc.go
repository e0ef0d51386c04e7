// Package cuda talks to a live GPU through the CUDA driver API, loaded at
// run time (fragsim probe); the recording allocator is in cuda/hook.
package cuda
