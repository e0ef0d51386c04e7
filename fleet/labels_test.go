package fleet

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLabel(t *testing.T) {
	re, err := ParseLabelRE(`(?P<job>[^/]+)/step\d+/r(?P<rank>\d+)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		tags map[string]string
		re   bool
		job  string
		rank int // -1: none
	}{
		{"runs/train/rank0.fst", nil, false, "train", 0},
		{"runs/train/rank-12.pickle", nil, false, "train", 12},
		{"runs/train/rank_3.pickle.gz", nil, false, "train", 3},
		{"runs/train/snapshot_7.pickle", nil, false, "train", 7},
		{"oom/snapshot_oom_rank-1.pickle.gz", nil, false, "oom", 1},
		{"jobs/llm/trace.rank2.fst", nil, false, "llm", 2},
		{"jobs/llm/frank1.fst", nil, false, "llm", -1}, // "frank1" is no rank
		{"solo.fst", nil, false, "solo", -1},
		{"runs/x/rank0.fst", map[string]string{"job": "pretrain", "rank": "5"}, false, "pretrain", 5}, // the tags before the file name
		{"runs/x/t.fst", map[string]string{"job": "pretrain", "rank": "5"}, false, "pretrain", 5},
		{"runs/x/t.fst", map[string]string{"rank": "-1"}, false, "x", -1},
		{"base/jobA/step10/r4.fst", nil, true, "jobA", 4},
		{"base/jobA/other.fst", nil, true, "jobA", -1}, // no match: the defaults (parent dir)
	} {
		var r = re
		if !tt.re {
			r = nil
		}
		l := Label(tt.path, tt.tags, r)
		rank := -1
		if l.Rank != nil {
			rank = *l.Rank
		}
		if l.Job != tt.job || rank != tt.rank {
			t.Errorf("Label(%q, %v) = %s rank %d, want %s rank %d", tt.path, tt.tags, l.Job, rank, tt.job, tt.rank)
		}
	}
	// --label wins over the tags.
	if l := Label("base/jobA/step1/r2.fst", map[string]string{"job": "t", "rank": "9"}, re); l.Job != "jobA" || *l.Rank != 2 {
		t.Errorf("--label against tags: %s %d, want jobA 2", l.Job, *l.Rank)
	}
	for _, bad := range []string{`(`, `rank(\d+)`} {
		if _, err := ParseLabelRE(bad); err == nil {
			t.Errorf("ParseLabelRE(%q): no error", bad)
		}
	}
}

func TestExpand(t *testing.T) {
	d := t.TempDir()
	mk := func(p string) string {
		full := filepath.Join(d, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		return full
	}
	a := mk("job/rank1.fst")
	b := mk("job/rank0.fst")
	c := mk("job/sub/snapshot_0.pickle.gz")
	mk("job/notes.txt")
	mk("job/.fleet-out/traces.fst") // a hidden directory is skipped
	e := mk("other/log.csv")
	odd := mk("other/odd.bin")
	list := filepath.Join(d, "list.txt")
	if err := os.WriteFile(list, []byte("# the others\n"+e+"\n\n"+odd+"\n"+a+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Expand([]string{filepath.Join(d, "job"), "@" + list, filepath.Join(d, "other", "*.csv"), "gs://bucket/x/*.pickle"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{b, a, c, e, odd, "gs://bucket/x/*.pickle"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Expand:\n got %q\nwant %q", got, want)
	}
	for _, bad := range []string{filepath.Join(d, "missing.fst"), filepath.Join(d, "*.nothing"), "@" + filepath.Join(d, "nolist")} {
		if _, err := Expand([]string{bad}); err == nil || !strings.Contains(err.Error(), filepath.Base(strings.TrimPrefix(bad, "@"))) {
			t.Errorf("Expand(%s): %v, want an error naming it", bad, err)
		}
	}
}
