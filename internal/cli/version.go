package cli

// Version is the release of fragsim this source tree is, as --version
// prints it and the Python wheel is named. A build may override it:
//
//	go build -ldflags "-X github.com/fragsim/fragsim/internal/cli.Version=1.2.3" ./cmd/fragsim
//
// It is a variable only so that -X can set it; nothing changes it at run
// time.
var Version = "0.9.0"

// Commit is the commit the binary was built from, for builds the Go
// toolchain cannot stamp (a git worktree, -buildvcs=false): set it with
// -ldflags "-X github.com/fragsim/fragsim/internal/cli.Commit=<hash>".
// The toolchain's stamp wins when there is one.
var Commit = ""

// VersionString is what --version prints: Version, with the commit the
// binary was built from when known (for fragsim-fleet, which shares it).
func VersionString() string { return version() }
