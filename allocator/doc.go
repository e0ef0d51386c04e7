// Package allocator names fragsim's allocator policies and builds them for the replay engine.
package allocator
