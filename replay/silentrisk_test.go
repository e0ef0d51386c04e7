package replay

import (
	"strings"
	"testing"
)

// TestSilentRisk checks the rule at its edges: free equal to the reserve is
// no risk; the cap is the reserved bytes less the shortfall, to 2 MiB; a
// shortfall the cache cannot cover is said so.
func TestSilentRisk(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		r      SilentRisk
		risk   bool
		margin int64
		capB   uint64
		remedy string
	}{
		{SilentRisk{FreeBytes: 172 * mib, ReserveBytes: 172 * mib}, false, 0, 0, ""},
		{SilentRisk{FreeBytes: 100 * mib, ReserveBytes: 172 * mib, ReservedBytes: 1000*mib + 1, CachedFreeBytes: 300 * mib,
			ReleasableBytes: 64 * mib, DeviceTotalBytes: 4096 * mib}, true, -72 * mib, 928 * mib,
			"returns 64.00 MiB of its 300.00 MiB cached free; cap its cache at 928.00 MiB (set_per_process_memory_fraction(0.2266) of 4.00 GiB)"},
		{SilentRisk{FreeBytes: 1 * mib, ReserveBytes: 172 * mib, ReservedBytes: 171 * mib, CachedFreeBytes: 171 * mib}, true,
			-171 * mib, 0, "capping its cache cannot cover the 171.00 MiB short (it holds 171.00 MiB)"},
	} {
		r := tc.r
		if r.AtRisk() != tc.risk || r.MarginBytes() != tc.margin || r.CapBytes() != tc.capB || !strings.Contains(r.Remedy(), tc.remedy) {
			t.Errorf("%+v: risk %v margin %d cap %d remedy %q, want %v %d %d %q", r, r.AtRisk(), r.MarginBytes(), r.CapBytes(),
				r.Remedy(), tc.risk, tc.margin, tc.capB, tc.remedy)
		}
	}
}
