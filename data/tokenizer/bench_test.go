package tokenizer

import (
	"testing"

	tiktoken "github.com/tiktoken-go/tokenizer"
)

// BenchmarkEncode measures tokenization throughput on Go source. The gpt2
// piece caches stay warm across iterations; the data package's benchmarks
// measure a whole corpus read once.
func BenchmarkEncode(b *testing.B) {
	text := goSource(b, 4<<20)
	for _, name := range Names() {
		tok, err := Lookup(name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			var dst []int32
			for b.Loop() {
				dst = tok.Encode(dst[:0], text)
			}
			b.ReportMetric(float64(len(text))/float64(len(dst)), "bytes/token")
		})
	}
	// The module's own encoder on the same text, for comparison.
	b.Run("module", func(b *testing.B) {
		codec, err := tiktoken.Get(tiktoken.R50kBase)
		if err != nil {
			b.Fatal(err)
		}
		s := string(text)
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			if _, _, err := codec.Encode(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	text := goSource(b, 1<<20)
	for _, name := range Names() {
		tok, err := Lookup(name)
		if err != nil {
			b.Fatal(err)
		}
		ids := tok.Encode(nil, text)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			var out []byte
			for b.Loop() {
				out, err = tok.Decode(out[:0], ids)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
