// Package allocator is the registry of fragsim's allocator policies: it builds them for the replay engine and holds every fact the analysis knows of each.
package allocator
