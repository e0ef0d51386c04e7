// Package fleet analyses many traces at once: the ranks of a job, the
// jobs of a fleet. Each input (a trace, a PyTorch snapshot or an RMM log)
// goes through the same import and the same comparison as `fragsim
// compare` (Analyze gives its Row); the rows are then reduced per key
// (a candidate setting, a job, a call stack, an OOM class) into Parts,
// which merge in any order (Merge), and Summarize turns the merged parts
// into the fleet's answer: the setting to use, the jobs' rank imbalance,
// the stacks that strand the most memory, the OOMs by class.
//
// The package runs nothing in parallel by itself and imports no engine:
// cmd/fragsim-fleet drives it on Apache Beam (Prism in-process, or a job
// server), and Run drives it in order, for tests and small fleets.
package fleet
