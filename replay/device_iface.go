package replay

// FractionSetter is implemented by the engine's devices: a policy whose
// configuration carries a memory fraction (PyTorch's
// per_process_memory_fraction key) sets it through it.
type FractionSetter interface {
	SetFraction(f float64)
}
