// Package monitor computes what a running process exports as Prometheus
// metrics: its allocator's fragmentation and largest free block, the
// memory outside the allocator and the silent-OOM risk by the forecast's
// rule (replay.SilentRisk). fragsim.monitor (Python, through `fragsim
// monitor`) and the recording hook (FRAGSIM_METRICS_ADDR) both export
// Metrics, computed here.
package monitor
