package conf

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	var size uint64
	var on bool
	setters := map[string]Setter{"page_mb": MiB(&size, 1<<20, 1<<20), "flag": Bool(&on)}
	tests := []struct {
		in      string
		size    uint64
		on      bool
		wantErr string
	}{
		{in: "", size: 7},
		{in: "page_mb:4", size: 4 << 20},
		{in: " page_mb : 2.5 , flag:True", size: 2 << 20, on: true},
		{in: "expandable_segments:True,roundup_power2_divisions:[256:1,512:2,>:8],page_mb:8", size: 8 << 20},
		{in: "bogus:1", size: 7, wantErr: `unknown option "bogus" (known: flag, page_mb)`},
		{in: "page_mb", size: 7, wantErr: "want key:value"},
		{in: "page_mb:-1", size: 7, wantErr: "not a positive number"},
		{in: "page_mb:0.5", size: 7, wantErr: "below the minimum"},
		{in: "page_mb:NaN", size: 7, wantErr: "not a positive number"},
		{in: "page_mb:+Inf", size: 7, wantErr: "not a positive number"},
		{in: "flag:maybe", size: 7, wantErr: "not true or false"},
	}
	for _, tt := range tests {
		size, on = 7, false
		err := Parse(tt.in, setters)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Parse(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if size != tt.size || on != tt.on {
			t.Errorf("Parse(%q) = size %d on %v, want %d %v", tt.in, size, on, tt.size, tt.on)
		}
	}
}
