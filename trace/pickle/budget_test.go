package pickle

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes f allocates (the process's, while f runs).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// memoryBound is what decoding data with budget b may allocate in all:
// the tables may outgrow the budget by what budgetEvery bytes of input
// build (13 bytes a byte at most: a value, and a Value on the stack)
// before the check, and append grows a large table by a quarter at a
// time, so that its successive copies add up to five times its last
// size; the strings' copies of the input come besides.
func memoryBound(data []byte, b int64) uint64 {
	return 6*(uint64(b)+13*budgetEvery) + 2*uint64(len(data))
}

// TestBudget checks that pickles that build far more than their size are
// stopped, with an error naming the offset, before they take much memory
// (two of the four shapes in the everyday pass, all with FRAGSIM_LONG=1).
func TestBudget(t *testing.T) {
	const n = 4 << 20
	bomb := func(fill []byte) []byte {
		b := append([]byte{opProto, 4}, bytes.Repeat(fill, n/len(fill))...)
		return append(b, opStop)
	}
	far := []byte{opProto, 4, opNone}
	for i := range n / 5 {
		far = append(far, opLongBinPut, byte(i), byte(i>>8), byte(i>>16), 0x40)
	}
	cases := map[string][]byte{
		"empty lists": bomb([]byte{opEmptyList}),
		"nones":       bomb([]byte{opNone}),
		"marks":       bomb([]byte{opMark}),
		"far puts":    append(far, opStop),
	}
	for name, data := range cases {
		// The everyday pass builds values on the stack (empty lists)
		// and memo entries (far puts); the long pass (FRAGSIM_LONG=1)
		// also bare values (nones) and marks.
		if !longTests() && (name == "nones" || name == "marks") {
			continue
		}
		var err error
		d := NewDecoder(data)
		d.budget = 2 << 20
		got := allocated(func() { _, err = d.DecodeDoc() })
		var pe *Error
		if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "past the budget") ||
			pe.Offset <= 0 || pe.Offset >= int64(len(data)) {
			t.Errorf("%s: err = %v, want the budget's error at an offset inside the input", name, err)
		}
		if bound := memoryBound(data, d.budget); got > bound {
			t.Errorf("%s: %d bytes allocated for %d bytes of input, more than %d", name, got, len(data), bound)
		}
	}
	// The default budget: empty lists past 3 bytes a byte of input.
	if os.Getenv("FRAGSIM_LONG") == "" {
		t.Log("long: set FRAGSIM_LONG=1 for the default budget's case")
		return
	}
	data := append(append([]byte{opProto, 4}, bytes.Repeat([]byte{opEmptyList}, 24<<20)...), opStop)
	d := NewDecoder(data)
	if _, err := d.DecodeDoc(); err == nil || !strings.Contains(err.Error(), "past the budget") {
		t.Errorf("24 MiB of EMPTY_LIST: err = %v, want the budget's error", err)
	}
}

// TestBudgetSnapshot checks that a snapshot's shape stays well within the
// budget.
func TestBudgetSnapshot(t *testing.T) {
	data := []byte(stackSnapshot(3000, 1))
	d := NewDecoder(data)
	if _, err := d.DecodeDoc(); err != nil {
		t.Fatal(err)
	}
	if c := d.cost(); c > budgetRatio*int64(len(data))/2 && c > budgetFloor {
		t.Errorf("snapshot of %d bytes costs %d", len(data), c)
	}
}

// TestBudgetSmall checks the budget's check with a small budget: the
// error comes at the first check past it, and a pickle within it decodes.
func TestBudgetSmall(t *testing.T) {
	// Past the first check (budgetEvery), 13 MiB of values at it.
	data := append(append([]byte{opProto, 4, opEmptyList, opMark}, bytes.Repeat([]byte{opNone}, budgetEvery+64<<10)...), opAppends, opStop)
	d := NewDecoder(data)
	d.budget = 8 << 20
	_, err := d.DecodeDoc()
	var pe *Error
	if !errors.As(err, &pe) || pe.Offset != budgetEvery || !strings.Contains(err.Error(), "past the budget of 8388608") {
		t.Fatalf("err = %v, want the budget's error at offset %d", err, budgetEvery)
	}
	d = NewDecoder(data)
	if _, err := d.DecodeDoc(); err != nil {
		t.Fatalf("within the default budget: %v", err)
	}
}
