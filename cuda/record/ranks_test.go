package record

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fragsim/fragsim/trace"
)

// TestRecordRanks records a launcher (a Python program that imports torch
// and allocates nothing, as torchrun) that starts workers, fresh Python
// processes, each allocating on its own device, with and without the
// variables torchrun gives them. Several workers: one trace each, named
// after the rank (RANK, else LOCAL_RANK, else the pid), with the worker's
// own allocations and the rank, device and pid tags beside the user's;
// none for the launcher. One worker: the output itself, unless a launcher
// gave it its rank.
func TestRecordRanks(t *testing.T) {
	t.Parallel()
	lib, env := setup(t)
	env = append(env, "FAKE_CUDA_DEVICES=2")
	// A shell that starts two workers: each is a first Python process,
	// which records from its start.
	shell := []string{"/bin/sh", "-c", `for i in 0 1; do RANK=$i python3 testdata/worker.py $i & echo "worker $i pid $!"; done; wait`}
	for _, tc := range []struct {
		name, mode string
		workers    int
		env        []string
		names      []string // the traces, by worker; %d for its pid
		ranks      []string // their rank tags
	}{
		{"RANK", "rank", 2, nil, []string{"run.rank0.fst", "run.rank1.fst"}, []string{"0", "1"}},
		{"LOCAL_RANK", "local", 2, nil, []string{"run.rank0.fst", "run.rank1.fst"}, []string{"0", "1"}},
		{"pid", "none", 2, nil, []string{"run.pid%d.fst", "run.pid%d.fst"}, []string{"", ""}},
		{"one rank twice", "same", 2, nil, []string{"run.rank0.pid%d.fst", "run.rank0.pid%d.fst"}, []string{"0", "0"}},
		{"one worker given its rank", "rank", 1, nil, []string{"run.rank0.fst"}, []string{"0"}},
		{"one worker", "none", 1, nil, []string{"run.fst"}, nil},
		{"one worker with the rank fragsim has", "none", 1, []string{"RANK=0", "WORLD_SIZE=1"}, []string{"run.fst"}, nil},
		{"shell launcher", "shell", 2, nil, []string{"run.rank0.fst", "run.rank1.fst"}, []string{"0", "1"}},
		{"workers outlive the launcher", "nowait", 2, nil, []string{"run.rank0.fst", "run.rank1.fst"}, []string{"0", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args, idle := []string{"python3", "testdata/launcher.py", tc.mode, strconv.Itoa(tc.workers)}, 1
			env := append(slices.Clip(env), tc.env...)
			var stdout, stderr bytes.Buffer
			var out, errw io.Writer = &stdout, &stderr
			switch tc.mode {
			case "shell":
				args, idle = shell, 0
			case "nowait":
				// The launcher exits while its workers run. Their stdout and
				// stderr are files: fragsim's wait for the launcher ends
				// then, not once every holder of a pipe closed it.
				args[2] = "rank"
				ready, files := t.TempDir(), t.TempDir()
				env = append(env, "LAUNCHER_NOWAIT="+ready)
				for _, w := range []*io.Writer{&out, &errw} {
					f, err := os.CreateTemp(files, "")
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					*w = f
				}
			}
			s, err := Run(Config{Output: filepath.Join(dir, "run.fst"), HookLib: lib, Args: args,
				Env: env, Stdout: out, Stderr: errw, Tags: map[string]string{"job": "j1"}})
			for _, w := range []struct {
				w   io.Writer
				buf *bytes.Buffer
			}{{out, &stdout}, {errw, &stderr}} {
				if f, ok := w.w.(*os.File); ok {
					b, _ := os.ReadFile(f.Name())
					w.buf.Write(b)
				}
			}
			if err != nil || s.ExitCode != 0 {
				t.Fatalf("Run: %v, summary %+v\n%s", err, s, stderr.String())
			}
			if waited := strings.Contains(stderr.String(), "waiting up to"); waited != (tc.mode == "nowait") {
				t.Errorf("waited for the workers: %v\n%s", waited, stderr.String())
			}
			pids := map[int]int{} // worker -> pid
			for _, m := range regexp.MustCompile(`worker (\d+) pid (\d+)`).FindAllStringSubmatch(stdout.String(), -1) {
				i, _ := strconv.Atoi(m[1])
				pids[i], _ = strconv.Atoi(m[2])
			}
			if len(pids) != tc.workers {
				t.Fatalf("launcher said %q", stdout.String())
			}
			var want []string
			for i, n := range tc.names {
				if strings.Contains(n, "%d") {
					n = fmt.Sprintf(n, pids[i])
				}
				want = append(want, n)
			}
			ents, _ := os.ReadDir(dir)
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
			}
			if sorted := slices.Sorted(slices.Values(want)); !slices.Equal(got, sorted) {
				t.Fatalf("the directory holds %v, want %v\n%s", got, sorted, stderr.String())
			}
			multi := want[0] != "run.fst"
			if multi && (len(s.Traces) != tc.workers || s.IdleProcesses != idle) {
				t.Errorf("summary %+v: want %d traces and %d idle launcher", s, tc.workers, idle)
			}
			if !multi && (len(s.Traces) != 0 || s.IdleProcesses != idle || s.Allocs != 3) {
				t.Errorf("summary %+v: want the one worker's trace, the launcher idle", s)
			}
			for i, name := range want {
				var rank string
				if multi {
					rank = tc.ranks[i]
				}
				checkWorker(t, filepath.Join(dir, name), i, pids[i], multi, rank)
				if multi {
					ts := s.Traces[i]
					if ts.Path != filepath.Join(dir, name) || ts.PID != pids[i] || ts.Allocs != int64(3+2*i) || !ts.Closed || ts.Rank != rank {
						t.Errorf("summary of worker %d: %+v", i, ts)
					}
				}
			}
		})
	}
}

// checkWorker checks that path holds worker i's allocations, and with
// tagged the tags of its process (rank "": no rank tag).
func checkWorker(t *testing.T, path string, i, pid int, tagged bool, rank string) {
	t.Helper()
	f, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := f.Header()
	if h.Tags["job"] != "j1" || !strings.HasSuffix(strings.Join(h.CommandLine, " "), fmt.Sprintf("worker.py %d", i)) {
		t.Errorf("%s: header %+v: want the job tag and worker %d's command line", path, h, i)
	}
	wantTags := map[string]string{}
	if tagged {
		wantTags = map[string]string{"device": strconv.Itoa(i), "pid": strconv.Itoa(pid)}
		wantTags["rank"] = rank
	}
	for _, k := range []string{"rank", "device", "pid"} {
		if v, ok := h.Tags[k]; v != wantTags[k] || ok != (wantTags[k] != "") {
			t.Errorf("%s: tag %s=%q, want %q", path, k, v, wantTags[k])
		}
	}
	var allocs, frees int
	for {
		e, err := f.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch e.Kind {
		case trace.KindAlloc:
			if want := uint64(1000*(i+1) + allocs); e.SizeBytes != want || int(e.Device) != i {
				t.Errorf("%s: alloc %d of %d bytes on device %d, want %d bytes on %d", path, allocs, e.SizeBytes, e.Device, want, i)
			}
			allocs++
		case trace.KindFreeCompleted:
			frees++
		}
	}
	if allocs != 3+2*i || frees != 2 {
		t.Errorf("%s: %d allocs, %d frees; want worker %d's %d and 2", path, allocs, frees, i, 3+2*i)
	}
}
