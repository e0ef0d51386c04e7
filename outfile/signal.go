package outfile

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// ExitCode is the process exit status after an interrupt removed the
// temporary files: 128 + SIGINT, as a shell reports a Ctrl-C.
const ExitCode = 130

var (
	mu   sync.Mutex
	live = map[*File]struct{}{}
	sigs chan os.Signal
	// exit ends the process once the temporary files are removed; tests
	// replace it.
	exit = os.Exit
)

// track registers an open temporary file, and catches SIGINT and SIGTERM
// while any is open. The signals are caught only then, so that a command
// with no output open (record, waiting for its program) keeps its own
// handling.
func track(f *File) {
	mu.Lock()
	defer mu.Unlock()
	live[f] = struct{}{}
	if sigs == nil {
		sigs = make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		go watch(sigs)
	}
}

// untrack forgets a temporary file that was committed or removed, and stops
// catching the signals when it was the last.
func untrack(f *File) {
	mu.Lock()
	defer mu.Unlock()
	delete(live, f)
	if len(live) == 0 && sigs != nil {
		signal.Stop(sigs)
		close(sigs) // no signal is sent on it once Stop returns
		sigs = nil
	}
}

// watch removes every open temporary file when a signal comes, and exits.
func watch(c chan os.Signal) {
	if _, ok := <-c; !ok {
		return
	}
	mu.Lock() // held to the exit: no commit renames a file meanwhile
	for f := range live {
		f.File.Close()
		os.Remove(f.temp)
	}
	exit(ExitCode)
	mu.Unlock() // reached only when a test replaced exit
}
