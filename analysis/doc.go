// Package analysis compares allocator policies on a trace, explains where fragmentation comes from and ranks the settings that remove it.
package analysis
