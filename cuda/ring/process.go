package ring

import (
	"encoding/json"
	"strconv"
)

// Several processes record at once under `fragsim record` (a launcher such
// as torchrun and its workers): each makes a region file of its own in the
// region directory fragsim names in $FRAGSIM_SHM_DIR, and renames it to
// RegionName(its pid) once its trace header is in it, so that the reader
// maps only regions ready to drain.

// RegionSuffix ends the name of every region file ready in a region
// directory.
const RegionSuffix = ".ring"

// RegionName is the name of process pid's region file in a region directory.
func RegionName(pid int) string { return strconv.Itoa(pid) + RegionSuffix }

// LaunchVars are the variables a launcher (torchrun, torch.distributed,
// accelerate, deepspeed) gives each worker to say which it is.
var LaunchVars = []string{"RANK", "LOCAL_RANK", "WORLD_SIZE"}

// Process describes the recording process. The hook stores it beside the
// trace header in a region's metadata (the header JSON's "fragsim_process"
// member, which the trace header does not keep).
type Process struct {
	PID int `json:"pid"`
	// Env holds those of LaunchVars the process's environment had.
	Env map[string]string `json:"env,omitempty"`
}

// ProcessMeta is the region metadata's member that holds the Process.
type ProcessMeta struct {
	Process *Process `json:"fragsim_process,omitempty"`
}

// MetaProcess returns the Process stored in the region's metadata, or nil.
func (r *Region) MetaProcess() *Process {
	var m ProcessMeta
	if json.Unmarshal(r.Meta(), &m) != nil {
		return nil
	}
	return m.Process
}
