package outfile

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// ExitCode is the process exit status after an interrupt removed the
// temporary files: 128 + SIGINT, as a shell reports a Ctrl-C, whichever
// of the caught signals came.
const ExitCode = 130

// Signals are the signals that remove the temporary files and end the
// process, while any exists: an interrupt (SIGINT), a kill (SIGTERM), a
// closed terminal (SIGHUP) and SIGQUIT.
var Signals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// cleanup is a temporary file to remove on a signal: an output's (f set,
// closed first) or a scratch file.
type cleanup struct {
	f    *os.File
	path string
	dir  bool // a scratch directory, removed with what it holds
}

func (c *cleanup) remove() {
	if c.dir {
		os.RemoveAll(c.path)
		return
	}
	os.Remove(c.path)
}

var (
	mu   sync.Mutex
	live = map[*cleanup]struct{}{}
	sigs chan os.Signal
	// exit ends the process once the temporary files are removed; tests
	// replace it.
	exit = os.Exit
)

// track makes a temporary file with create, which sets c's file and
// path, and registers it, catching the Signals while any is registered.
// The signals are caught from before the file exists to after it is
// registered, so that no signal ends the process with the file left
// behind; and only while a file is registered, so that a command with no
// output open (record, waiting for its program) keeps its own handling.
func track(c *cleanup, create func() error) error {
	mu.Lock()
	defer mu.Unlock()
	if sigs == nil {
		sigs = make(chan os.Signal, 1)
		signal.Notify(sigs, Signals...)
		go watch(sigs)
	}
	if err := create(); err != nil {
		stopIfIdle()
		return err
	}
	live[c] = struct{}{}
	return nil
}

// stopIfIdle stops catching the signals when no file is registered; mu is
// held.
func stopIfIdle() {
	if len(live) == 0 && sigs != nil {
		signal.Stop(sigs)
		close(sigs) // no signal is sent on it once Stop returns
		sigs = nil
	}
}

// untrack forgets a temporary file that was committed or removed, and stops
// catching the signals when it was the last.
func untrack(c *cleanup) {
	mu.Lock()
	defer mu.Unlock()
	if _, ok := live[c]; !ok {
		return
	}
	delete(live, c)
	stopIfIdle()
}

// watch removes every registered temporary file when a signal comes, and
// exits.
func watch(c chan os.Signal) {
	if _, ok := <-c; !ok {
		return
	}
	mu.Lock() // held to the exit: no commit renames a file meanwhile
	for t := range live {
		if t.f != nil {
			t.f.Close()
		}
		t.remove()
	}
	exit(ExitCode)
	mu.Unlock() // reached only when a test replaced exit
}
