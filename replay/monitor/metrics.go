package monitor

// LabelDevice is the label every metric carries: the CUDA device index,
// as PyTorch numbers devices.
const LabelDevice = "device"

// Metric is one exported metric.
type Metric struct {
	// Name is the metric's Prometheus name; a counter's ends in _total.
	Name string
	// Type is "gauge" or "counter".
	Type string
	Help string
	// Device is set for the metrics that need the device's free and total
	// memory: they are left out while those are not known.
	Device bool
	value  func(*Gauges) float64
}

// Value returns the metric's value in g.
func (m Metric) Value(g *Gauges) float64 { return m.value(g) }

// Metrics lists what a monitor exports, in exposition order. The names are
// stable: add, never rename.
var Metrics = []Metric{
	{Name: "fragsim_reserved_bytes", Type: "gauge",
		Help:  "Bytes the allocator holds from the device (torch.cuda.memory_stats reserved_bytes.all.current).",
		value: func(g *Gauges) float64 { return float64(g.ReservedBytes) }},
	{Name: "fragsim_allocated_bytes", Type: "gauge",
		Help:  "Bytes in blocks handed out to tensors (allocated_bytes.all.current).",
		value: func(g *Gauges) float64 { return float64(g.AllocatedBytes) }},
	{Name: "fragsim_inactive_split_bytes", Type: "gauge",
		Help:  "Free bytes in segments that still hold live blocks: empty_cache() cannot return them (inactive_split_bytes.all.current).",
		value: func(g *Gauges) float64 { return float64(g.InactiveSplitBytes) }},
	{Name: "fragsim_largest_free_block_bytes", Type: "gauge",
		Help:  "The largest free block in the allocator's cache: the largest request it serves without a new segment.",
		value: func(g *Gauges) float64 { return float64(g.LargestFreeBlockBytes) }},
	{Name: "fragsim_cached_free_bytes", Type: "gauge",
		Help:  "Bytes the allocator holds that no block uses (reserved - active).",
		value: func(g *Gauges) float64 { return float64(g.CachedFreeBytes) }},
	{Name: "fragsim_fragmentation_ratio", Type: "gauge",
		Help:  "1 - largest free block / cached free bytes (0 with nothing cached).",
		value: func(g *Gauges) float64 { return g.FragmentationRatio }},
	{Name: "fragsim_at_peak_pct", Type: "gauge",
		Help:  "100 * (1 - active / reserved) where reserved peaked, as far as the exporter saw it.",
		value: func(g *Gauges) float64 { return g.AtPeakPct }},
	{Name: "fragsim_outside_allocator_bytes", Type: "gauge", Device: true,
		Help:  "Device memory outside the allocator: device total - reserved - device free (CUDA context, kernels, libraries, other processes).",
		value: func(g *Gauges) float64 { return float64(g.OutsideAllocatorBytes) }},
	{Name: "fragsim_device_free_bytes", Type: "gauge", Device: true,
		Help:  "The device's free memory (torch.cuda.mem_get_info).",
		value: func(g *Gauges) float64 { return float64(g.DeviceFreeBytes) }},
	{Name: "fragsim_silent_oom_risk", Type: "gauge", Device: true,
		Help:  "1 while the device's free memory is below what the memory outside the allocator may still ask for (the silent-OOM risk of fragsim cohost's forecast), else 0.",
		value: func(g *Gauges) float64 { return float64(g.SilentOOMRisk) }},
	{Name: "fragsim_silent_oom_margin_bytes", Type: "gauge", Device: true,
		Help:  "Device free memory less what the memory outside the allocator may still ask for: negative while at risk.",
		value: func(g *Gauges) float64 { return float64(g.SilentOOMMarginBytes) }},
	{Name: "fragsim_oom_total", Type: "counter",
		Help:  "Out-of-memory errors the allocator raised (num_ooms).",
		value: func(g *Gauges) float64 { return float64(g.OOMs) }},
	{Name: "fragsim_alloc_retries_total", Type: "counter",
		Help:  "Allocations that failed at first and were retried after the cache was released (num_alloc_retries).",
		value: func(g *Gauges) float64 { return float64(g.AllocRetries) }},
}

// Names returns the metrics' names, in exposition order.
func Names() []string {
	n := make([]string, len(Metrics))
	for i, m := range Metrics {
		n[i] = m.Name
	}
	return n
}
