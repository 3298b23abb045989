package data

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/parquet-go/parquet-go"

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
				train, val, err := Load(context.Background(), c, tok, Options{CacheDir: b.TempDir()})
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
	train, val, err := Load(context.Background(), c, tokenizer.Byte, opt)
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
		train, val, err := Load(context.Background(), c, tokenizer.Byte, opt)
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

// BenchmarkEncodeFormats tokenizes the same 8 MB of Go source, one
// document per file, from loose text files, JSON lines, gzip-compressed
// JSON lines and Parquet, with the byte tokenizer: what reading each
// format costs. Bytes are those of the text.
func BenchmarkEncodeFormats(b *testing.B) {
	src, err := GoSource()
	if err != nil {
		b.Fatal(err)
	}
	var docs []string
	size := 0
	for _, f := range src.Files {
		if size >= 8<<20 {
			break
		}
		text, err := os.ReadFile(f.Path)
		if err != nil {
			b.Fatal(err)
		}
		docs = append(docs, string(text))
		size += len(text)
	}
	dir := b.TempDir()
	loose := looseFiles(b, filepath.Join(dir, "loose"), docs)
	jsonl := jsonLines(b, "text", docs)
	if err := os.WriteFile(filepath.Join(dir, "docs.jsonl"), jsonl, 0o644); err != nil {
		b.Fatal(err)
	}
	writeGzip(b, filepath.Join(dir, "docs.jsonl.gz"), jsonl)
	rows := make([]parquetRow, len(docs))
	for i, d := range docs {
		rows[i] = parquetRow{ID: int64(i), Text: d}
	}
	f, err := os.Create(filepath.Join(dir, "docs.parquet"))
	if err != nil {
		b.Fatal(err)
	}
	w := parquet.NewGenericWriter[parquetRow](f)
	if _, err := w.Write(rows); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	for _, tc := range []struct {
		name string
		c    *Corpus
	}{
		{"text", loose},
		{"jsonl", mustCorpus(b, filepath.Join(dir, "docs.jsonl"))},
		{"jsonl.gz", mustCorpus(b, filepath.Join(dir, "docs.jsonl.gz"))},
		{"parquet", mustCorpus(b, filepath.Join(dir, "docs.parquet"))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				tk, _ := encodeTo(b, filepath.Join(b.TempDir(), "tokens"), tc.c, tokenizer.Byte, chunkSize, runtime.GOMAXPROCS(0))
				if tk.Len() != int64(size) {
					b.Fatalf("%d tokens, want %d", tk.Len(), size)
				}
				tk.Close()
			}
		})
	}
}

func mustCorpus(b *testing.B, paths ...string) *Corpus {
	c, err := NewCorpus(paths...)
	if err != nil {
		b.Fatal(err)
	}
	return c
}
