// Package trace reads and writes fragsim's GPU allocation trace files.
package trace
