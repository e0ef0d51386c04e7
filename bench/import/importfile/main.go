// Command importfile imports a PyTorch snapshot as `fragsim import -q`
// does (pytorch.ImportFile), with the import options the command line
// does not offer, for the import benchmarks (bench/import/gzip.sh).
//
//	importfile [-stream-from BYTES] IN OUT
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fragsim/fragsim/trace/pytorch"
)

func main() {
	from := flag.Int64("stream-from", 0, "pickle size from which a compressed snapshot is decoded while it is decompressed (pytorch.Options.StreamFromBytes; 0: the default, 1: always)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: importfile [-stream-from BYTES] IN OUT")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 || *from < 0 {
		flag.Usage()
		os.Exit(2)
	}
	if _, err := pytorch.ImportFile(flag.Arg(0), flag.Arg(1), pytorch.Options{StreamFromBytes: *from}); err != nil {
		fmt.Fprintln(os.Stderr, "importfile:", err)
		os.Exit(1)
	}
}
