package fleet

import (
	"encoding/json"
	"math/rand"
	"testing"

	"github.com/fragsim/fragsim/analysis"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// handRow builds a row whose baseline ("caching") peaks at base bytes,
// with each other candidate's peak given.
func handRow(input, job string, rank *int, base int64, peaks map[string]int64, stacks map[string]uint64, oom analysis.OOMClass) Row {
	r := Row{Input: input, Job: job, Rank: rank, Baseline: "caching", BaselinePeakReservedBytes: uint64(base),
		Recommendation: &analysis.Recommendation{Label: "caching"}}
	r.Candidates = append(r.Candidates, Candidate{Label: "caching", PeakReservedBytes: uint64(base)})
	for label, p := range peaks {
		r.Candidates = append(r.Candidates, Candidate{Label: label, Setting: label + "-setting",
			PeakReservedBytes: uint64(p), SavingBytes: base - p})
	}
	r.Candidates = append(r.Candidates, Candidate{Label: "ideal", Limit: true, PeakReservedBytes: 1, SavingBytes: base - 1})
	for k, v := range stacks {
		r.Stacks = append(r.Stacks, analysis.Share{Key: k, StrandedBytes: v})
	}
	if oom != "" {
		r.OOM = &analysis.Explanation{Class: oom}
	}
	return r
}

func intp(n int) *int { return &n }

// handFleet is a small fleet whose aggregates are worked out by hand in
// TestSummarizeByHand.
func handFleet() []Row {
	return []Row{
		handRow("train/rank0.fst", "train", intp(0), 3*gib,
			map[string]int64{"expandable": 2 * gib, "ms128": 3*gib + 10*mib, "pooled": 3*gib - gib/10},
			map[string]uint64{"s1": 100, "s2": 50}, ""),
		handRow("train/rank1.fst", "train", intp(1), 3*gib,
			map[string]int64{"expandable": 2*gib + gib/2, "ms128": 3*gib + gib/2, "pooled": 3 * gib}, nil, ""),
		handRow("train/rank3.fst", "train", intp(3), 6*gib,
			map[string]int64{"expandable": 6*gib + 100*mib, "ms128": 4 * gib, "pooled": 6 * gib},
			map[string]uint64{"s1": 300, "s3": 10}, ""),
		handRow("serve/a.pickle", "serve", nil, gib,
			map[string]int64{"expandable": gib, "ms128": gib / 2}, nil, analysis.OOMFragmentation),
		{Input: "serve/bad.fst", Job: "serve", Error: "corrupt"},
		handRow("serve/b.pickle", "serve", nil, 2*gib, nil, nil, analysis.OOMExhaustion),
	}
}

func summarizeRows(rows []Row) *Fleet {
	var parts []Part
	for _, r := range rows {
		parts = append(parts, PartsOf(r, analysis.Goal{})...)
	}
	return Summarize(parts, analysis.Goal{})
}

func TestSummarizeByHand(t *testing.T) {
	f := summarizeRows(handFleet())
	if f.Inputs != 6 || f.Analysed != 5 || f.Failed != 1 || len(f.Failures) != 1 || f.Failures[0].Input != "serve/bad.fst" {
		t.Errorf("inputs %d analysed %d failed %d %v, want 6 5 1 [serve/bad.fst]", f.Inputs, f.Analysed, f.Failed, f.Failures)
	}
	want := map[string]CandidateSummary{
		// improved rank0 and rank1, unchanged on a (0), worse on rank3 (−100 MiB, past 1% of 6 GiB).
		"expandable": {Traces: 4, Improved: 2, Unchanged: 1, Worse: 1, TotalSavingBytes: gib + gib/2 - 100*mib, MedianSavingBytes: gib / 4},
		// −10 MiB on rank0 is within 1% of 3 GiB: unchanged; rank1 worse by 0.5 GiB.
		"ms128":  {Traces: 4, Improved: 2, Unchanged: 1, Worse: 1, TotalSavingBytes: 2*gib - 10*mib, MedianSavingBytes: (gib/2 - 10*mib) / 2},
		"pooled": {Traces: 3, Improved: 1, Unchanged: 2, Worse: 0, TotalSavingBytes: gib / 10, MedianSavingBytes: 0},
	}
	if len(f.Candidates) != len(want) {
		t.Fatalf("%d candidates, want %d (the baseline and the physical limit are not candidates): %+v", len(f.Candidates), len(want), f.Candidates)
	}
	for _, c := range f.Candidates {
		w := want[c.Label]
		if c.Traces != w.Traces || c.Improved != w.Improved || c.Unchanged != w.Unchanged || c.Worse != w.Worse ||
			c.TotalSavingBytes != w.TotalSavingBytes || c.MedianSavingBytes != w.MedianSavingBytes {
			t.Errorf("%s: %+v, want %+v", c.Label, c, w)
		}
	}
	if f.Candidates[0].Label != "ms128" || f.Candidates[1].Label != "expandable" {
		t.Errorf("candidates not sorted by total saving: %s, %s", f.Candidates[0].Label, f.Candidates[1].Label)
	}
	for _, c := range f.Candidates {
		switch c.Label {
		case "expandable":
			if c.WorstRegression == nil || c.WorstRegression.Input != "train/rank3.fst" || c.WorstRegression.SavingBytes != -100*mib {
				t.Errorf("expandable's worst regression %+v, want train/rank3.fst at -100 MiB", c.WorstRegression)
			}
		case "pooled":
			if c.WorstRegression != nil {
				t.Errorf("pooled: worst regression %+v, want none", c.WorstRegression)
			}
		}
	}
	if f.Recommendation == nil || f.Recommendation.Label != "pooled" || len(f.Recommendation.Regressions) != 0 {
		t.Errorf("fleet recommendation %+v, want pooled (the only one worse on none)", f.Recommendation)
	}
	if r := f.WithRegressions; r == nil || r.Label != "ms128" || len(r.Regressions) != 1 || r.Regressions[0].Input != "train/rank1.fst" {
		t.Errorf("with regressions %+v, want ms128, worse on train/rank1.fst", r)
	}

	if len(f.Jobs) != 2 {
		t.Fatalf("%d jobs, want 2", len(f.Jobs))
	}
	tr := f.Jobs[0]
	if tr.Job != "train" || tr.Imbalance != 2 || tr.PeakReservedMinBytes != uint64(3*gib) || tr.PeakReservedMedianBytes != uint64(3*gib) ||
		tr.PeakReservedMaxBytes != uint64(6*gib) || tr.Outlier.Rank == nil || *tr.Outlier.Rank != 3 || tr.Median.Rank == nil || *tr.Median.Rank != 1 ||
		len(tr.Ranks) != 3 || tr.Ranks[2] != 3 {
		t.Errorf("train: %+v, want imbalance 2.00 (6 GiB over 3), outlier rank 3, median rank 1, ranks 0 1 3", tr)
	}
	if len(tr.StackDiffs) != 2 || tr.StackDiffs[0].Stack != "s1" || tr.StackDiffs[0].DiffBytes != 300 || tr.StackDiffs[1].Stack != "s3" {
		t.Errorf("train stack diffs %+v, want s1 +300, s3 +10", tr.StackDiffs)
	}
	sv := f.Jobs[1]
	if sv.Job != "serve" || sv.Traces != 2 || sv.PeakReservedMedianBytes != uint64(gib+gib/2) || sv.Outlier.Input != "serve/b.pickle" ||
		sv.Imbalance < 1.333 || sv.Imbalance > 1.334 || len(sv.Ranks) != 0 {
		t.Errorf("serve: %+v, want 2 traces (the failed one left out), median 1.5 GiB, imbalance 1.33, outlier serve/b.pickle", sv)
	}
	if len(f.Stacks) != 3 || f.Stacks[0].Stack != "s1" || f.Stacks[0].StrandedBytes != 400 || f.Stacks[0].Traces != 2 {
		t.Errorf("stacks %+v, want s1 400 B over 2 traces first", f.Stacks)
	}
	if len(f.OOMClasses) != 2 || f.OOMClasses["fragmentation"] != 1 || f.OOMClasses["exhaustion"] != 1 {
		t.Errorf("OOM classes %v, want fragmentation 1, exhaustion 1", f.OOMClasses)
	}
}

// TestMergeOrderFree checks that the parts give the same fleet whatever
// order and grouping they are merged in, as an engine's combiners do.
func TestMergeOrderFree(t *testing.T) {
	var parts []Part
	for _, r := range handFleet() {
		parts = append(parts, PartsOf(r, analysis.Goal{})...)
	}
	want, _ := json.Marshal(Summarize(parts, analysis.Goal{}))
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 20; i++ {
		p := append([]Part(nil), parts...)
		rng.Shuffle(len(p), func(a, b int) { p[a], p[b] = p[b], p[a] })
		// Merge in two halves, then the halves together.
		cut := rng.Intn(len(p))
		merged := append(MergeAll(p[:cut]), MergeAll(p[cut:])...)
		got, _ := json.Marshal(Summarize(merged, analysis.Goal{}))
		if string(got) != string(want) {
			t.Fatalf("shuffle %d: the fleet differs:\n%s\nwant\n%s", i, got, want)
		}
	}
}

func TestVerdictGoals(t *testing.T) {
	base := Candidate{PeakReservedBytes: uint64(10 * gib), AtPeakPct: 20}
	for _, tt := range []struct {
		c    Candidate
		goal analysis.GoalKind
		want string
	}{
		{Candidate{SavingBytes: 200 * mib}, analysis.GoalReserved, Improved},
		{Candidate{SavingBytes: 100 * mib}, analysis.GoalReserved, Unchanged}, // 1% of 10 GiB is 102 MiB
		{Candidate{SavingBytes: -200 * mib}, analysis.GoalReserved, Worse},
		{Candidate{SavingBytes: gib, OOMs: 1}, analysis.GoalReserved, Worse}, // an OOM the baseline did not have
		{Candidate{AtPeakPct: 18.5, SavingBytes: -gib}, analysis.GoalFragmentation, Improved},
		{Candidate{AtPeakPct: 20.5}, analysis.GoalFragmentation, Unchanged},
		{Candidate{Error: "boom"}, analysis.GoalReserved, Failed},
	} {
		if got := verdict(tt.c, base, analysis.Goal{Kind: tt.goal}); got != tt.want {
			t.Errorf("verdict(%+v, %s) = %s, want %s", tt.c, tt.goal, got, tt.want)
		}
	}
}
