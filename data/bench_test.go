package data

import (
	"fmt"
	"testing"

	"github.com/polysketch/polysketch/data/tokenizer"
)

// BenchmarkLoadGoSource tokenizes the whole default corpus into an empty
// cache: the first run's cost. Run it with -benchtime=1x.
func BenchmarkLoadGoSource(b *testing.B) {
	c, err := GoSource()
	if err != nil {
		b.Fatal(err)
	}
	for _, tok := range []tokenizer.Tokenizer{tokenizer.Byte, gpt2(b)} {
		b.Run(tok.Name(), func(b *testing.B) {
			b.SetBytes(c.Bytes())
			var n int64
			for b.Loop() {
				train, val, err := Load(c, tok, Options{CacheDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				n = train.Len() + val.Len()
				train.Close()
				val.Close()
			}
			b.ReportMetric(float64(n), "tokens")
		})
	}
}

// BenchmarkLoadCached opens the default corpus's token files once made:
// every later run's cost.
func BenchmarkLoadCached(b *testing.B) {
	c, err := GoSource()
	if err != nil {
		b.Fatal(err)
	}
	opt := Options{CacheDir: b.TempDir()}
	train, val, err := Load(c, tokenizer.Byte, opt)
	if err != nil {
		b.Fatal(err)
	}
	train.Close()
	val.Close()
	for b.Loop() {
		c, err := GoSource()
		if err != nil {
			b.Fatal(err)
		}
		train, val, err := Load(c, tokenizer.Byte, opt)
		if err != nil {
			b.Fatal(err)
		}
		train.Close()
		val.Close()
	}
}

// BenchmarkNext draws batches from a token file of 10M 2-byte tokens
// (the page cache holds it, as it would a corpus in use).
func BenchmarkNext(b *testing.B) {
	tk := countTokens(b, 10_000_000, 50257)
	for _, shape := range []struct{ batch, seqLen int }{{8, 1024}, {64, 256}} {
		name := fmt.Sprintf("B=%d,N=%d", shape.batch, shape.seqLen)
		tokens := int64(shape.batch * (shape.seqLen + 1))
		b.Run("random/"+name, func(b *testing.B) {
			r, err := NewRandom(tk, shape.batch, shape.seqLen, 1)
			if err != nil {
				b.Fatal(err)
			}
			var bt Batch
			b.SetBytes(4 * tokens)
			for b.Loop() {
				if err := r.Next(&bt); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("sequential/"+name, func(b *testing.B) {
			s, err := NewSequential(tk, shape.batch, shape.seqLen, 0)
			if err != nil {
				b.Fatal(err)
			}
			var bt Batch
			b.SetBytes(4 * tokens)
			for b.Loop() {
				if err := s.Next(&bt); err != nil {
					s.Reset()
				}
			}
		})
	}
}
