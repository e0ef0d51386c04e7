package traces_test

import "os"

// longTests reports whether the long sweeps run (FRAGSIM_LONG=1).
//
// The tests of this package replay the committed recordings; most are
// sweeps over every recording of a kind. The everyday pass (go test -race
// ./...) replays a few of each kind, chosen in each test so that every
// feature, setting and outcome the sweep meets is still met; the long pass
// (FRAGSIM_LONG=1 go test ./..., without the race detector) replays them
// all. The replay engine, the caching allocator and the trace reader that
// the sweeps run are the same for every recording, and their own
// packages' tests run them under the race detector.
func longTests() bool { return os.Getenv("FRAGSIM_LONG") == "1" }
