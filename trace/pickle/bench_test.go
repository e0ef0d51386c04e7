package pickle

import (
	"os"
	"testing"
)

func BenchmarkDecodeValues(b *testing.B) {
	data, err := os.ReadFile("testdata/values.p4.pickle")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeDoc decodes the pickle named by $FRAGSIM_BENCH_SNAPSHOT.
func BenchmarkDecodeDoc(b *testing.B) {
	path := os.Getenv("FRAGSIM_BENCH_SNAPSHOT")
	if path == "" {
		b.Skip("FRAGSIM_BENCH_SNAPSHOT not set")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := NewDecoder(data).DecodeDoc(); err != nil {
			b.Fatal(err)
		}
	}
}
