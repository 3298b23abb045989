package tokenizer

import (
	"strings"
	"testing"

	"github.com/dlclark/regexp2/v2"
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
				dst = encode(b, tok, dst[:0], text)
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
		ids := encode(b, tok, nil, text)
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

// BenchmarkEncodeBPE measures the encoding throughput of tokenizers read
// from tokenizer.json files, on the Go source of BenchmarkEncode: a
// vocabulary of 16k fitted to that text, the same file with Llama-3's
// split pattern (a regular expression, matched by regexp2), and GPT-2's
// own tokenizer.json.
func BenchmarkEncodeBPE(b *testing.B) {
	text := goSource(b, 4<<20)
	c := NewCounts(DefaultSpecial)
	c.Add(text)
	trained, err := Train(c, TrainOptions{VocabSize: 16384, Special: DefaultSpecial})
	if err != nil {
		b.Fatal(err)
	}
	llama, err := Parse(llamaStyle(b, trained, llama3Pattern, ""))
	if err != nil {
		b.Fatal(err)
	}
	gpt2, err := Parse(gpt2File(b))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tok  Tokenizer
	}{{"trained-16k", trained}, {"llama3-split-16k", llama}, {"gpt2-file", gpt2}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			var dst []int32
			for b.Loop() {
				dst = encode(b, tc.tok, dst[:0], text)
			}
			b.ReportMetric(float64(len(text))/float64(len(dst)), "bytes/token")
		})
	}
}

// BenchmarkCount measures the counting of pieces that tokenizer training
// starts with, on one core.
func BenchmarkCount(b *testing.B) {
	text := goSource(b, 4<<20)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		NewCounts(DefaultSpecial).Add(text)
	}
}

// BenchmarkTrain measures the merges of tokenizer training: a vocabulary
// of 16k from the counts of 4 MB of Go source.
func BenchmarkTrain(b *testing.B) {
	text := goSource(b, 4<<20)
	c := NewCounts(DefaultSpecial)
	c.Add(text)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := Train(c, TrainOptions{VocabSize: 16384, Special: DefaultSpecial}); err != nil {
			b.Fatal(err)
		}
	}
}

// gpt2Pattern is GPT-2's split as a regular expression: a Split with it
// is matched by regexp2, not by a scanner of Parse's.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// BenchmarkEncodeRegex measures encoding with a Split that regexp2
// matches, each match bounded by MatchTimeout: GPT-2's pattern on the Go
// source of BenchmarkEncode, with a vocabulary of 16k fitted to it.
func BenchmarkEncodeRegex(b *testing.B) {
	text := goSource(b, 4<<20)
	c := NewCounts(DefaultSpecial)
	c.Add(text)
	trained, err := Train(c, TrainOptions{VocabSize: 16384, Special: DefaultSpecial})
	if err != nil {
		b.Fatal(err)
	}
	tok, err := Parse(withSplits(b, trained, gpt2Pattern))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	var dst []int32
	for b.Loop() {
		dst = encode(b, tok, dst[:0], text)
	}
}

// BenchmarkLongMatch measures the longest match a request or a corpus
// chunk can ask of a pattern that does not backtrack: GPT-2's pattern
// over a megabyte of letters, one piece, against MatchTimeout.
func BenchmarkLongMatch(b *testing.B) {
	re := regexp2.MustCompile(gpt2Pattern, regexp2.None)
	re.MatchTimeout = MatchTimeout
	text := []rune(strings.Repeat("abcdefgh", 1<<17))
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		m, err := re.FindRunesMatch(text)
		if err != nil || m.RuneLength != len(text) {
			b.Fatalf("match of %d runes, %v", m.RuneLength, err)
		}
	}
}
