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
