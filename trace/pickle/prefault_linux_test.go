package pickle

import (
	"bytes"
	"testing"
)

// TestPrefaultKeepsBytes checks that faulting pages in changes no byte of
// fresh (zero) memory nor of memory already written.
func TestPrefaultKeepsBytes(t *testing.T) {
	fresh := make([]byte, 9<<20+123)
	used := make([]byte, 3<<20+5)
	for i := range used {
		used[i] = byte(i*7 + 1)
	}
	want := bytes.Clone(used)
	if !prefault([][]byte{fresh[1:], used, nil}) {
		t.Skip("the kernel has no MADV_POPULATE_WRITE")
	}
	if i := bytes.IndexFunc(fresh, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("fresh memory has a non-zero byte at %d", i)
	}
	if !bytes.Equal(used, want) {
		t.Fatal("written memory changed")
	}
	if got := spare(make([]uint64, 3, 10)); len(got) != 7*8 {
		t.Fatalf("spare of 7 uint64s is %d bytes, want 56", len(got))
	}
}
