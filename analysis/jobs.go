package analysis

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fragsim/fragsim/replay"
	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/trace"
)

// job is one replay to run.
type job struct {
	run     *Run
	factory driver.Factory
	cfg     replay.Config
	// open, when set, replaces the comparison's opener (transformed traces).
	open Opener
	// noSeries skips the time series and histogram.
	noSeries bool
	// prepare, when set, is called with the reader before the replay and
	// may set cfg.Observer.
	prepare func(r *trace.Reader, cfg *replay.Config)
	// err is why the replay failed (run.Error is its message).
	err error
}

// runJobs runs the jobs, at most parallel at once, each on its own reader.
// It fails only when every job failed; otherwise failures are kept in the
// runs. Its error keeps the jobs' errors (errors.Is and errors.As see
// them): the one error when every job failed alike, else each under its
// run's label.
func runJobs(open Opener, jobs []*job, parallel, maxPoints int, progress func(int64, int, int)) error {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	var (
		total    atomic.Int64
		done     atomic.Int64
		progMu   sync.Mutex
		wg       sync.WaitGroup
		sem      = make(chan struct{}, parallel)
		stopTick = make(chan struct{})
		tickDone = make(chan struct{})
	)
	report := func() {
		if progress != nil {
			progMu.Lock()
			progress(total.Load(), int(done.Load()), len(jobs))
			progMu.Unlock()
		}
	}
	go func() {
		defer close(tickDone)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopTick:
				return
			case <-t.C:
				report()
			}
		}
	}()
	for _, j := range jobs {
		wg.Add(1)
		go func(j *job) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			runOne(open, j, maxPoints, &total)
			done.Add(1)
		}(j)
	}
	wg.Wait()
	close(stopTick)
	<-tickDone
	report()
	var errs []error
	for _, j := range jobs {
		if j.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", j.run.Label, j.err))
		}
	}
	if len(errs) == len(jobs) && len(errs) > 0 {
		if len(errs) > 1 && sameErrors(jobs) {
			return jobs[0].err
		}
		return errors.Join(errs...)
	}
	return nil
}

// sameErrors reports whether every job failed with the same message (a bad
// trace fails every replay alike).
func sameErrors(jobs []*job) bool {
	for _, j := range jobs[1:] {
		if j.run.Error != jobs[0].run.Error {
			return false
		}
	}
	return true
}

// fail records why the job's replay failed.
func (j *job) fail(err error) {
	j.err, j.run.Error = err, err.Error()
}

// runOne replays one job with a collector attached.
func runOne(open Opener, j *job, maxPoints int, total *atomic.Int64) {
	t0 := time.Now()
	defer func() { j.run.WallS = time.Since(t0).Seconds() }()
	if j.open != nil {
		open = j.open
	}
	r, c, err := open()
	if err != nil {
		j.fail(err)
		return
	}
	if c != nil {
		defer c.Close()
	}
	cfg := j.cfg
	var col *collector
	if !j.noSeries {
		col = newCollector(j.run.Label, maxPoints)
		cfg.Observer = col.observe
	}
	if j.prepare != nil {
		j.prepare(r, &cfg)
	}
	var n int64
	obs := cfg.Observer
	cfg.Observer = func(s *replay.Sample) {
		if obs != nil {
			obs(s)
		}
		if n == 0 {
			j.run.firstTimeNS = s.TimeNS
		}
		if n++; n&(1<<16-1) == 0 {
			total.Add(1 << 16)
		}
	}
	res, err := replay.Run(r, j.factory, cfg)
	total.Add(n & (1<<16 - 1))
	if err != nil && res != nil && errors.Is(err, trace.ErrTruncated) {
		j.run.Truncated = err.Error()
	} else if err != nil {
		j.fail(err)
	}
	if res != nil {
		res.Conf = j.run.Conf
		j.run.Result = res
		if col != nil {
			j.run.Series = col.series()
			j.run.FreeHist = col.histogram()
		}
	}
}
