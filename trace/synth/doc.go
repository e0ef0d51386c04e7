// Package synth generates realistic allocation traces from a workload model (agents, models, request mix, hold times, KV-cache growth, training), deterministically for a seed.
//
// [Generate] streams the events of a [Config] into a trace.Sink: each agent
// moves its own model copy to the device (every parameter and buffer of a
// BERT-base or GPT-2 small, as Module.cuda() allocates them), then steps are
// scheduled among the agents at random: inference forward passes whose
// activations are allocated and freed in the order PyTorch and transformers
// do, decode steps that grow each layer's KV cache by concatenation, or
// training steps whose saved activations live until backward. Outputs are
// held and freed at random moments. Events are alloc, free_requested and
// free_completed (at once), and markers (MarkerAgent at each switch of
// agent, MarkerStep at each request, Aux its number); never device events,
// which only a real allocator produces. Memory is bounded by the workload's
// live set, not by the number of events.
//
// Calibration: the default config models the multi-agent baseline of
// traces/workloads/multi_agent.py. Against three real runs of it (PyTorch
// 2.11 on an H200, in traces/), a long synthetic trace agrees within a total
// variation distance of 0.10 on the request size distribution (log2
// buckets; measured 0.05, while the real runs differ among themselves by
// 0.05 to 0.08) and 0.02 on the lifetime distribution (allocations made
// between an allocation and its free, log2 buckets; measured 0.001); a
// synthetic run as long as a real one agrees within 0.15 on both, and its
// peak live bytes within 2% of the real runs' mean (measured: within 0.2%). The bytes
// left live at the end (weights, buffers, cuBLAS workspaces) are equal to the
// byte, and allocations per request agree within 1%. Decode agents, set up
// like traces/workloads/kv_decode.py, agree with its real trace within 0.12
// on sizes (measured 0.07; the real run holds only a dozen requests) and
// 0.02 on lifetimes (measured 0.003). Train agents, set up like
// traces/workloads/train.py, agree with its real trace within 0.10 on sizes
// (measured 0.05) and 0.05 on lifetimes (measured 0.02), and keep the same
// bytes (weights, workspaces, AdamW state) to the byte.
package synth
