package fleet

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Labels says which job a trace belongs to and which rank it is.
type Labels struct {
	Job  string
	Rank *int // nil when neither the path nor the tags give one
}

// defaultRank finds a rank in a file name: rank0, rank-0, rank_0 (also
// _rank-N, as OOM observers name their dumps), snapshot_0.pickle.
var defaultRank = []*regexp.Regexp{
	regexp.MustCompile(`(?i)(?:^|[^a-z0-9])rank[-_]?(\d+)`),
	regexp.MustCompile(`(?i)^snapshot_(\d+)\.`),
}

// ParseLabelRE checks a --label expression: it must compile and name at
// least one of the groups job and rank.
func ParseLabelRE(s string) (*regexp.Regexp, error) {
	if s == "" {
		return nil, nil
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("--label %q: %w", s, err)
	}
	if re.SubexpIndex("job") < 0 && re.SubexpIndex("rank") < 0 {
		return nil, fmt.Errorf("--label %q: name a group job or rank, as in (?P<job>[^/]+)/rank(?P<rank>\\d+)", s)
	}
	return re, nil
}

// Label gives the job and rank of the input at path, with the trace's
// header tags. In order of precedence:
//   - re (--label), matched against the path with slashes: its named
//     groups job and rank;
//   - the tags job and rank (`record --tag job=...`; `record` of several
//     processes stores each one's rank);
//   - the defaults: a rank in the file name (rank0, rank-0, rank_0,
//     _rank-N, snapshot_N.ext), and the parent directory as the job.
//
// A rank that is not a non-negative integer is no rank.
func Label(path string, tags map[string]string, re *regexp.Regexp) Labels {
	var job, rank string
	slashed := filepath.ToSlash(path)
	if re != nil {
		if m := re.FindStringSubmatch(slashed); m != nil {
			if i := re.SubexpIndex("job"); i >= 0 {
				job = m[i]
			}
			if i := re.SubexpIndex("rank"); i >= 0 {
				rank = m[i]
			}
		}
	}
	if job == "" {
		job = tags["job"]
	}
	if rank == "" {
		rank = tags["rank"]
	}
	base := filepath.Base(path)
	if rank == "" {
		for _, d := range defaultRank {
			if m := d.FindStringSubmatch(base); m != nil {
				rank = m[1]
				break
			}
		}
	}
	if job == "" {
		job = filepath.Base(filepath.Dir(filepath.Clean(path)))
		if job == "." || job == "/" || job == "" {
			job = strings.TrimSuffix(base, filepath.Ext(base))
		}
	}
	l := Labels{Job: job}
	if n, err := strconv.Atoi(rank); err == nil && n >= 0 {
		l.Rank = &n
	}
	return l
}
