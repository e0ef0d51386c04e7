package pytorch

import (
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The input formats an import reads.
const (
	FormatPyTorch = "pytorch" // a memory snapshot pickle: this package
	FormatRMM     = "rmm"     // a RAPIDS RMM log: package trace/rmm
)

// DetectFormat tells an RMM CSV log from a PyTorch snapshot by the name of
// the file at path and its first bytes: a .csv file, or one whose first
// line starts with RMM's first column (after a byte-order mark), is an
// RMM log; anything else, standard input ("-") and a file that cannot be
// read included, is taken for a snapshot (its import says what is wrong).
// A path that is not a regular file (a pipe, a FIFO) is not read here: it
// gives its bytes once, and they are the import's (ImportFile sniffs them
// and says when they start as an RMM log).
func DetectFormat(path string) string {
	if path == "-" {
		return FormatPyTorch
	}
	if strings.EqualFold(filepath.Ext(path), ".csv") {
		return FormatRMM
	}
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return FormatPyTorch
	}
	f, err := os.Open(path)
	if err != nil {
		return FormatPyTorch
	}
	defer f.Close()
	head := make([]byte, len(bom)+len(rmmFirstColumn))
	n, _ := io.ReadFull(f, head)
	if strings.HasPrefix(strings.TrimPrefix(string(head[:n]), bom), rmmFirstColumn) {
		return FormatRMM
	}
	return FormatPyTorch
}

// bom is the byte-order mark a log may begin with, and rmmFirstColumn how
// an RMM log's header line starts.
const (
	bom            = "\ufeff"
	rmmFirstColumn = "Thread,"
)
