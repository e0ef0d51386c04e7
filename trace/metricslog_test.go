package trace

import (
	"bytes"
	"compress/gzip"
	"reflect"
	"strings"
	"testing"
)

// TestReadMetricsLog reads a metrics log as the device log of the same
// samples reads, plain and gzip'd; its bad lines are refused with their
// line numbers, by its own checks and by the device log's.
func TestReadMetricsLog(t *testing.T) {
	const log = `{"time_ns": 1764000000000000002, "device": 0, "device_total_bytes": 8000, "metrics": {"fragsim_device_free_bytes": 3000, "fragsim_reserved_bytes": 1}}

# a comment
{"time_ns": 1764000000000000001, "device": 1, "metrics": {"fragsim_reserved_bytes": 1}}
{"time_ns": 1764000000000000001, "device": 1, "device_total_bytes": 8e3, "metrics": {"fragsim_device_free_bytes": 2000.0}, "warning": "w"}
`
	want, err := ReadDeviceLog(strings.NewReader("1764000000000000002 0 3000 8000\n1764000000000000001 1 2000 8000\n"), "dev")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadMetricsLog(strings.NewReader(log), "m.jsonl")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v\nwant %+v", got, err, want)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(log))
	zw.Close()
	if got, err := ReadMetricsLog(&z, "m.jsonl.gz"); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("gzip'd: %+v, %v", got, err)
	}
	for _, tc := range []struct{ log, want string }{
		{"\n\n1 0 2 3\n", "m.jsonl: line 3: not a metrics record"},
		{`{"device": 0}` + "\n", "m.jsonl: line 1: the record lacks time_ns or device"},
		{`{"time_ns": 1, "device": 0} {}` + "\n", "line 1: more than one JSON value"},
		{"# x\n" + `{"time_ns": 5, "device": 0, "device_total_bytes": 10, "metrics": {"fragsim_device_free_bytes": 11}}` + "\n",
			"m.jsonl: line 2: free_bytes 11 is above total_bytes 10"},
		{`{"time_ns": 5, "device": -1, "device_total_bytes": 10, "metrics": {"fragsim_device_free_bytes": 1}}`,
			"m.jsonl: line 1: device \"-1\""},
		{`{"time_ns": 5, "device": 0, "device_total_bytes": 10, "metrics": {"fragsim_device_free_bytes": 1.5}}`,
			"m.jsonl: line 1: free_bytes \"1.5\""},
		{strings.Repeat("x", maxMetricsLogLine+1), "line 1: longer than"},
	} {
		if _, err := ReadMetricsLog(strings.NewReader(tc.log), "m.jsonl"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60q: %v, want %q", tc.log, err, tc.want)
		}
	}
}
