package replay

import (
	"strings"
	"testing"
)

func TestExplainMismatch(t *testing.T) {
	for _, tc := range []struct {
		first, rule, try string
	}{
		{"", "", ""},
		{"event 3: alloc of 3145733 bytes on stream 0x0: recorded segment_alloc 0x7f5600000000+6291456, replayed segment_alloc 0x7f5600000000+4194304; reserved 0",
			"segment sizing", "--conf"},
		{"event 3: alloc of 3145733 bytes on stream 0x0: recorded segment_alloc 0x7f5600000000+6291456, replayed segment_alloc 0x7f5700000000+6291456; reserved 0",
			"segment placement", "sizes and counts match"},
		{"event 9: alloc of 100 bytes on stream 0x0: recorded segment_alloc 0x7f5600000000+2097152, the replay made no such call; reserved 0",
			"block reuse: the replay served from a cached block", "free_completed"},
		{"event 9: alloc of 100 bytes on stream 0x0: no recorded device event, replayed segment_alloc 0x7f5600000000+2097152; reserved 0",
			"block reuse: the real allocator served", "--conf"},
		{"event 9: alloc of 100 bytes on stream 0x0: recorded segment_free 0x7f5600000000+2097152, the replay made no such call; reserved 0",
			"segment release: the real allocator released", "--fraction"},
		{"event 9: alloc of 100 bytes on stream 0x0: no recorded device event, replayed segment_free 0x7f5600000000+2097152; reserved 0",
			"segment release: the replay released", "--capacity"},
		{"event 5: alloc of 512 bytes on stream 0x0: recorded at 0x7f5600000200, replayed at 0x7f5600000000 (block of 512 bytes)",
			"block placement", "first device mismatch"},
	} {
		rule, try := ExplainMismatch(tc.first)
		if !strings.HasPrefix(rule, tc.rule) || !strings.Contains(try, tc.try) || (tc.first != "" && (rule == "" || try == "")) {
			t.Errorf("ExplainMismatch(%q) = %q, %q; want a rule starting %q and a try naming %q", tc.first, rule, try, tc.rule, tc.try)
		}
	}
}
