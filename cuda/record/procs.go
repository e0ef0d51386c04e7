package record

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fragsim/fragsim/cuda/ring"
	"github.com/fragsim/fragsim/outfile"
	"github.com/fragsim/fragsim/trace"
)

// Several processes of one run may record: a launcher such as torchrun
// and its workers, or a program and the Python processes it starts. Each
// makes its own region in the region directory ($FRAGSIM_SHM_DIR), which
// Run drains into a temporary trace of its own; once the run ended, the
// rule of Run's comment says which traces are written, and where.

// exitGrace is how long Run waits, once the program ended, for the other
// recording processes still running (a launcher's workers end before it,
// unless it was killed) before it writes what they recorded so far.
const exitGrace = 10 * time.Second

// proc is one recording process of the run.
type proc struct {
	region string // its region file
	pid    int
	reg    *ring.Region
	tw     *traceWriter
	info   *ring.Process // from its region's metadata

	done    bool
	closed  bool   // it closed its recording itself
	running bool   // it still ran when its trace was completed
	missing uint64 // calls its trace lacks
	sum     *Summary
	err     error
}

// used says whether the process used the GPU: it recorded an allocation
// (or an allocation that failed).
func (p *proc) used() bool { return p.sum != nil && (p.sum.Allocs > 0 || p.sum.OOMs > 0) }

// procs are the recording processes of one run, in the order Run found
// their regions (the order they started recording, nearly).
type procs struct {
	dir    string       // the region directory
	out    string       // the output, absolute
	spare  *traceWriter // made before the program starts (an output that cannot be written fails at once); the first region's
	all    []*proc
	seen   map[string]bool
	stderr io.Writer
	warned bool
}

// scan adds the regions made since the last scan.
func (ps *procs) scan() {
	ents, err := os.ReadDir(ps.dir)
	if err != nil {
		ps.warn(fmt.Errorf("record regions: %w", err))
		return
	}
	var fresh []*proc
	for _, e := range ents {
		name := e.Name()
		pid, err := strconv.Atoi(strings.TrimSuffix(name, ring.RegionSuffix))
		if !strings.HasSuffix(name, ring.RegionSuffix) || err != nil || ps.seen[name] {
			continue
		}
		ps.seen[name] = true
		fresh = append(fresh, &proc{region: filepath.Join(ps.dir, name), pid: pid})
	}
	slices.SortFunc(fresh, func(a, b *proc) int { return a.pid - b.pid })
	for _, p := range fresh {
		if p.reg, err = ring.Map(p.region); err != nil {
			ps.warn(err)
			continue
		}
		if p.tw = ps.spare; p.tw != nil {
			ps.spare = nil
			p.tw.reg = p.reg
		} else if p.tw, err = newTraceWriter(p.reg, ps.out); err != nil {
			p.err, p.done = err, true
			p.reg.Close()
			os.Remove(p.region)
		}
		ps.all = append(ps.all, p)
	}
}

func (ps *procs) warn(err error) {
	if !ps.warned {
		ps.warned = true
		fmt.Fprintf(orStdW(ps.stderr, os.Stderr), "fragsim record: %v\n", err)
	}
}

// step drains every recording process and completes the trace of each
// that closed its recording or ended.
func (ps *procs) step(now time.Time) {
	ps.scan()
	for _, p := range ps.all {
		if p.done {
			continue
		}
		p.tw.step(now, ps.stderr)
		if p.reg.State() == ring.StateClosed || !alive(p.pid) {
			ps.complete(p, false)
		}
	}
}

// complete drains what is left of p's region, completes its temporary
// trace and summarises it, then drops the region.
func (ps *procs) complete(p *proc, running bool) {
	p.done, p.running = true, running
	p.closed = p.reg.State() == ring.StateClosed
	p.missing, p.err = p.tw.complete()
	p.info = p.tw.proc
	if p.err == nil {
		p.sum, p.err = Summarize(p.tw.tmp)
	}
	p.reg.Close()
	os.Remove(p.region)
}

// wind waits, once the program ended, up to exitGrace for the recording
// processes still running to end (a signal in stop ends the wait), then
// completes every trace.
func (ps *procs) wind(stop <-chan os.Signal) {
	deadline := time.Now().Add(exitGrace)
	tick := time.NewTicker(drainEvery)
	defer tick.Stop()
	said := false
wait:
	for {
		ps.step(time.Now())
		var pids []string
		for _, p := range ps.all {
			if !p.done {
				pids = append(pids, strconv.Itoa(p.pid))
			}
		}
		if len(pids) == 0 || time.Now().After(deadline) {
			break
		}
		if !said {
			said = true
			fmt.Fprintf(orStdW(ps.stderr, os.Stderr), "fragsim record: the program ended; waiting up to %v for the recorded processes still running (%s)\n",
				exitGrace, strings.Join(pids, ", "))
		}
		select {
		case <-stop:
			break wait
		case <-tick.C:
		}
	}
	for _, p := range ps.all {
		if !p.done {
			ps.complete(p, true)
		}
	}
}

// abort removes every temporary trace not renamed into place.
func (ps *procs) abort() {
	if ps.spare != nil {
		ps.spare.abort()
	}
	for _, p := range ps.all {
		if p.tw != nil {
			p.tw.abort()
		}
		if !p.done && p.reg != nil {
			p.reg.Close()
		}
	}
}

// write puts the traces in place, by the rule of Run's comment, and returns
// the run's summary. output is the output as the caller named it; env the
// program's environment; inputs the files no trace may replace.
func (ps *procs) write(output string, code int, env, inputs []string) (*Summary, error) {
	var used, rest []*proc
	var firstErr error
	for _, p := range ps.all {
		switch {
		case p.err != nil:
			if firstErr == nil {
				firstErr = p.err
			}
		case p.used():
			used = append(used, p)
		default:
			rest = append(rest, p)
		}
	}
	if len(used) <= 1 && !(len(used) == 1 && launched(used[0].info, env)) {
		// One process used the GPU (or none): its trace is the output, as
		// when one process records.
		var p *proc
		switch {
		case len(used) == 1:
			p = used[0]
		case len(rest) > 0:
			p = rest[0]
		case firstErr != nil:
			return &Summary{Path: ps.out, ExitCode: code}, firstErr
		default:
			return &Summary{Path: ps.out, ExitCode: code}, fmt.Errorf("%w to %s", ErrNoTrace, ps.out)
		}
		if err := p.tw.rename(p.tw.out); err != nil {
			return &Summary{Path: ps.out, ExitCode: code}, err
		}
		s := p.sum
		s.Path, s.ExitCode, s.Closed, s.Missing = ps.out, code, p.closed, p.missing
		s.IdleProcesses = len(used) + len(rest) - 1
		ps.sayRunning(p)
		return s, firstErr
	}

	// Several: one trace each, named after its rank.
	keys := map[string]int{}
	for _, p := range used {
		keys[traceKey(p)]++
	}
	s := &Summary{Path: ps.out, ExitCode: code, Closed: true, IdleProcesses: len(rest)}
	for _, p := range used {
		key := traceKey(p)
		if keys[key] > 1 { // two processes of one rank
			key += ".pid" + strconv.Itoa(p.pid)
		}
		name := RankedName(output, key)
		t, err := ps.writeRanked(p, name, inputs)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		s.Traces = append(s.Traces, t)
		s.Closed = s.Closed && t.Closed
		s.Missing += t.Missing
		s.Events += t.Events
		s.Allocs += t.Allocs
		s.Frees += t.Frees
		s.OOMs += t.OOMs
		s.Markers += t.Markers
		s.FileBytes += t.FileBytes
		ps.sayRunning(p)
	}
	slices.SortFunc(s.Traces, func(a, b *Summary) int {
		return cmp.Or(cmp.Compare(rankOrder(a), rankOrder(b)), cmp.Compare(a.PID, b.PID))
	})
	return s, firstErr
}

func (ps *procs) sayRunning(p *proc) {
	if p.running {
		fmt.Fprintf(orStdW(ps.stderr, os.Stderr), "fragsim record: process %d still ran when its trace was written: what it did later is not in it\n", p.pid)
	}
}

// rankOrder sorts traces by rank, those without one last.
func rankOrder(s *Summary) int {
	if r, err := strconv.Atoi(s.Rank); err == nil {
		return r
	}
	return math.MaxInt
}

// writeRanked writes p's trace to name (checked against inputs as every
// output is) with its rank, device and pid in the header's tags: a copy
// of the temporary trace with the new header, put in place as the
// temporary trace is.
func (ps *procs) writeRanked(p *proc, name string, inputs []string) (*Summary, error) {
	if err := outfile.Check(name, inputs...); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, err
	}
	src, err := os.Open(p.tw.tmp)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	tw, err := newTraceWriter(nil, abs) // the temporary file beside name
	if err != nil {
		return nil, err
	}
	defer tw.abort()
	tags := processTags(p)
	err = trace.Reheader(tw.f, src, func(h *trace.Header) {
		if h.Tags == nil {
			h.Tags = map[string]string{}
		}
		for k, v := range tags {
			h.Tags[k] = v
		}
	})
	if err == nil {
		err = tw.f.Sync()
	}
	if cerr := tw.f.Close(); err == nil {
		err = cerr
	}
	tw.f = nil
	if err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", name, err)
	}
	if err := tw.rename(tw.out); err != nil {
		return nil, err
	}
	p.tw.abort() // the first copy
	t := *p.sum
	t.Path, t.Closed, t.Missing, t.Rank, t.PID = name, p.closed, p.missing, tags["rank"], p.pid
	if st, err := os.Stat(tw.out); err == nil {
		t.FileBytes = st.Size()
	}
	return &t, nil
}

// processTags are the header tags that tell the traces of a run's
// processes apart: rank (RANK, else LOCAL_RANK; none when the process had
// neither), local_rank and world_size when the process had them, pid, and
// device, the devices it allocated on (comma-separated).
func processTags(p *proc) map[string]string {
	tags := map[string]string{"pid": strconv.Itoa(p.pid)}
	if r, ok := rankOf(p.info); ok {
		tags["rank"] = r
	}
	if p.info != nil {
		if v, ok := p.info.Env["LOCAL_RANK"]; ok {
			tags["local_rank"] = v
		}
		if v, ok := p.info.Env["WORLD_SIZE"]; ok {
			tags["world_size"] = v
		}
	}
	var devs []string
	for _, d := range p.sum.Devices {
		devs = append(devs, strconv.Itoa(int(d)))
	}
	tags["device"] = strings.Join(devs, ",")
	return tags
}

// rankOf returns the process's rank: $RANK, else $LOCAL_RANK, when it is a
// number.
func rankOf(info *ring.Process) (string, bool) {
	if info == nil {
		return "", false
	}
	for _, k := range []string{"RANK", "LOCAL_RANK"} {
		v, ok := info.Env[k]
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
			return strconv.Itoa(n), true
		}
	}
	return "", false
}

// traceKey names p's trace among the run's: rankN, else pidN.
func traceKey(p *proc) string {
	if r, ok := rankOf(p.info); ok {
		return "rank" + r
	}
	return "pid" + strconv.Itoa(p.pid)
}

// RankedName is the name of one process's trace when several processes
// record: output with key (rank0, pid12345) put before its extension, so
// run.fst becomes run.rank0.fst.
func RankedName(output, key string) string {
	dir, base := filepath.Split(output)
	ext := filepath.Ext(base)
	if ext == base { // ".fst", or no extension
		ext = ""
	}
	return dir + strings.TrimSuffix(base, ext) + "." + key + ext
}

// launched says whether a launcher gave the process its rank: it has one
// of ring.LaunchVars that the program's environment (env) lacks or sets
// otherwise. (A variable fragsim itself was given, as in a container that
// sets RANK for the one process it runs, does not count.)
func launched(info *ring.Process, env []string) bool {
	if info == nil {
		return false
	}
	for _, k := range ring.LaunchVars {
		v, ok := info.Env[k]
		if !ok {
			continue
		}
		if pv, pok := lookup(env, k); !pok || pv != v {
			return true
		}
	}
	return false
}

func lookup(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}
