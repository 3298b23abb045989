package data

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/polysketch/polysketch/data/tokenizer"
)

func gpt2(t testing.TB) tokenizer.Tokenizer {
	t.Helper()
	g, err := tokenizer.GPT2()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func readAll(t testing.TB, tk *Tokens) []int32 {
	t.Helper()
	ids := make([]int32, tk.Len())
	if err := tk.Copy(ids, 0); err != nil {
		t.Fatal(err)
	}
	return ids
}

func decode(t testing.TB, tok tokenizer.Tokenizer, ids []int32) string {
	t.Helper()
	b, err := tok.Decode(nil, ids)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// separator returns the text that tok's tokens of a corpus decode to
// between documents: GPT-2's end-of-text token, and nothing for the byte
// tokenizer, which has none.
func separator(tok tokenizer.Tokenizer) string {
	switch tok.Name() {
	case "gpt2", sepTokenizer{}.Name():
		return "<|endoftext|>"
	}
	return ""
}

// contents returns the texts of the files with text, in corpus order,
// with tok's separator between them.
func contents(t testing.TB, c *Corpus, tok tokenizer.Tokenizer) string {
	t.Helper()
	var docs []string
	for _, f := range c.Files {
		b, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 {
			docs = append(docs, string(b))
		}
	}
	return strings.Join(docs, separator(tok))
}

// sepTokenizer is the byte tokenizer with an end-of-text token, 256. Its
// tokens of the parts of a text are those of the whole, wherever the text
// is cut, so tests know exactly what encodeFiles must make.
type sepTokenizer struct{}

func (sepTokenizer) Name() string     { return "bytesep" }
func (sepTokenizer) VocabSize() int   { return 257 }
func (sepTokenizer) EndOfText() int32 { return 256 }
func (sepTokenizer) Encode(ctx context.Context, dst []int32, text []byte) ([]int32, error) {
	return tokenizer.Byte.Encode(ctx, dst, text)
}
func (sepTokenizer) Decode(dst []byte, tokens []int32) ([]byte, error) {
	for i, id := range tokens {
		if id == 256 {
			dst = append(dst, "<|endoftext|>"...)
			continue
		}
		var err error
		if dst, err = tokenizer.Byte.Decode(dst, tokens[i:i+1]); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// logs collects what Load says.
type logs []string

func (l *logs) logf(format string, args ...any) { *l = append(*l, fmt.Sprintf(format, args...)) }

func (l *logs) has(s string) bool {
	return slices.ContainsFunc(*l, func(m string) bool { return strings.Contains(m, s) })
}

func TestLoadSplitByFile(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{}
	for i := range 40 {
		files[fmt.Sprintf("doc%02d.txt", i)] = fmt.Sprintf("Document %d says héllo\xff wörld %s\n", i, strings.Repeat("la ", i))
	}
	writeFiles(t, dir, files)
	c, err := NewCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []tokenizer.Tokenizer{tokenizer.Byte, gpt2(t)} {
		t.Run(tok.Name(), func(t *testing.T) {
			const frac = 0.3
			train, val, err := Load(context.Background(), c, tok, Options{CacheDir: t.TempDir(), ValFraction: frac})
			if err != nil {
				t.Fatal(err)
			}
			defer train.Close()
			defer val.Close()
			trainFiles, valFiles := c.Split(frac)
			if len(trainFiles.Files) == 0 || len(valFiles.Files) == 0 {
				t.Fatalf("split of 40 files: %d + %d", len(trainFiles.Files), len(valFiles.Files))
			}
			for _, tc := range []struct {
				tokens *Tokens
				files  *Corpus
			}{{train, trainFiles}, {val, valFiles}} {
				if got, want := decode(t, tok, readAll(t, tc.tokens)), contents(t, tc.files, tok); got != want {
					t.Errorf("%s decodes to %q, want %q", tc.tokens, got, want)
				}
				if tc.tokens.Tokenizer() != tok.Name() || tc.tokens.VocabSize() != tok.VocabSize() {
					t.Errorf("%s: tokenizer %s, vocabulary %d", tc.tokens, tc.tokens.Tokenizer(), tc.tokens.VocabSize())
				}
			}
		})
	}
}

func TestLoadOneFile(t *testing.T) {
	dir := t.TempDir()
	text := strings.Repeat("One file only, so validation is its tail. ", 50)
	writeFiles(t, dir, map[string]string{"only.txt": text})
	c, err := NewCorpus(filepath.Join(dir, "only.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []tokenizer.Tokenizer{tokenizer.Byte, gpt2(t)} {
		for _, frac := range []float64{0, 0.1, 0.999} {
			var l logs
			train, val, err := Load(context.Background(), c, tok, Options{CacheDir: t.TempDir(), ValFraction: frac, Logf: l.logf})
			if err != nil {
				t.Fatal(err)
			}
			all, _ := tok.Encode(context.Background(), nil, []byte(text))
			if frac == 0 {
				frac = DefaultValFraction
			}
			nv := int64(math.Ceil(frac * float64(len(all))))
			nv = min(nv, int64(len(all))-1)
			if val.Len() != nv || train.Len() != int64(len(all))-nv {
				t.Errorf("%s, fraction %v: %d + %d tokens, want %d + %d", tok.Name(), frac, train.Len(), val.Len(), len(all)-int(nv), nv)
			}
			if got := append(readAll(t, train), readAll(t, val)...); !slices.Equal(got, all) {
				t.Errorf("%s: training then validation tokens are not the file's tokens", tok.Name())
			}
			if !l.has("holding out its last") {
				t.Errorf("no message about the split by position: %q", l)
			}
			train.Close()
			val.Close()
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "some text", "b.txt": "more"})
	c, err := NewCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(dir, "a.txt")
	for _, tc := range []struct {
		name string
		opt  Options
		want []string
	}{
		{"fraction too big", Options{ValFraction: 1}, []string{"fraction 1"}},
		{"negative fraction", Options{ValFraction: -0.1}, []string{"fraction -0.1"}},
		{"cache dir is a file", Options{CacheDir: notDir}, []string{notDir, "cache directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Load(context.Background(), c, tokenizer.Byte, tc.opt)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestLoadChangedFiles changes files between listing and reading: a file
// replaced by a directory (the portable stand-in for an unreadable file,
// since tests may run as root) and a file rewritten.
func TestLoadChangedFiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(path string) error
		want   string
	}{
		{"became a directory", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Mkdir(p, 0o755)
		}, "is now a directory, not a regular file"},
		{"removed", os.Remove, "no such file"},
		{"rewritten", func(p string) error {
			return os.WriteFile(p, []byte("different length"), 0o644)
		}, "changed since the corpus was listed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"a.txt": "alpha", "b.txt": "beta"})
			c, err := NewCorpus(dir)
			if err != nil {
				t.Fatal(err)
			}
			victim := filepath.Join(dir, "b.txt")
			if err := tc.change(victim); err != nil {
				t.Fatal(err)
			}
			cache := t.TempDir()
			_, _, err = Load(context.Background(), c, tokenizer.Byte, Options{CacheDir: cache})
			if err == nil {
				t.Fatal("Load succeeded")
			}
			if msg := err.Error(); !strings.Contains(msg, victim) || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q, want one line naming %s and saying %q", msg, victim, tc.want)
			}
			// The split that failed leaves no temporary file behind.
			left, _ := os.ReadDir(cache)
			for _, e := range left {
				if strings.Contains(e.Name(), ".tmp") {
					t.Errorf("cache directory holds %s after a failed build", e.Name())
				}
			}
		})
	}
}

func TestCache(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "first file", "b.txt": "second file"})
	cache := t.TempDir()
	load := func() (string, logs) {
		t.Helper()
		c, err := NewCorpus(filepath.Join(dir, "*.txt"))
		if err != nil {
			t.Fatal(err)
		}
		var l logs
		train, val, err := Load(context.Background(), c, tokenizer.Byte, Options{CacheDir: cache, Logf: l.logf})
		if err != nil {
			t.Fatal(err)
		}
		defer train.Close()
		defer val.Close()
		return decode(t, tokenizer.Byte, append(readAll(t, train), readAll(t, val)...)), l
	}
	cacheFiles := func() []string {
		entries, err := os.ReadDir(cache)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, e := range entries {
			n = append(n, e.Name())
		}
		return n
	}

	// Temporary files of a build killed long ago go; recent ones, maybe
	// of a build under way, stay.
	stale, recent := filepath.Join(cache, "tokens-x.bin.tmp1"), filepath.Join(cache, "tokens-y.bin.tmp2")
	writeFiles(t, cache, map[string]string{filepath.Base(stale): "old", filepath.Base(recent): "new"})
	longAgo := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(stale, longAgo, longAgo); err != nil {
		t.Fatal(err)
	}

	text, l := load()
	if _, err := os.Stat(stale); err == nil {
		t.Error("a stale temporary file is left")
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a recent temporary file is removed: %v", err)
	}
	os.Remove(recent)
	if text != "first filesecond file" || !l.has("tokenized") {
		t.Fatalf("first load: %q, log %q", text, l)
	}
	first := cacheFiles()
	if len(first) == 0 || !strings.HasPrefix(first[0], "tokens-byte-") {
		t.Fatalf("cache holds %q, want token files", first)
	}

	text, l = load()
	if text != "first filesecond file" || l.has("tokenized") || !l.has("tokens from") {
		t.Fatalf("second load: %q, log %q; want a cache hit", text, l)
	}

	// A change of content and time makes a new token file, which
	// replaces the old one.
	writeFiles(t, dir, map[string]string{"b.txt": "changed file"})
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "b.txt"), later, later); err != nil {
		t.Fatal(err)
	}
	text, l = load()
	if text != "first filechanged file" || !l.has("tokenized") || !l.has("removed") {
		t.Fatalf("after a change: %q, log %q", text, l)
	}
	if got := cacheFiles(); len(got) != len(first) || slices.Equal(got, first) {
		t.Fatalf("cache holds %q after a change, want as many files as before, %q, not the same", got, first)
	}
}

// TestLoadRemovesReplaced changes a corpus and loads it again: the token
// files of its earlier state go, and nothing else in the cache does.
func TestLoadRemovesReplaced(t *testing.T) {
	later := time.Now().Add(time.Minute)
	for _, tc := range []struct {
		name   string
		files  map[string]string
		change func(t *testing.T, dir string)
	}{
		{"file rewritten", map[string]string{"a.txt": "alpha beta", "b.txt": "gamma", "c.txt": "delta"}, func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"a.txt": "alpha beta gamma"})
			if err := os.Chtimes(filepath.Join(dir, "a.txt"), later, later); err != nil {
				t.Fatal(err)
			}
		}},
		{"file touched", map[string]string{"a.txt": "alpha beta", "b.txt": "gamma", "c.txt": "delta"}, func(t *testing.T, dir string) {
			for _, f := range []string{"a.txt", "b.txt", "c.txt"} {
				if err := os.Chtimes(filepath.Join(dir, f), later, later); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"file added", map[string]string{"a.txt": "alpha beta", "b.txt": "gamma", "c.txt": "delta"}, func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"sub/d.txt": "epsilon"})
		}},
		{"file removed", map[string]string{"a.txt": "alpha beta", "b.txt": "gamma", "c.txt": "delta"}, func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "c.txt")); err != nil {
				t.Fatal(err)
			}
		}},
		{"one file, split by position", map[string]string{"only.txt": "one two three four"}, func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"only.txt": "one two three four five"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, otherDir, cache := t.TempDir(), t.TempDir(), t.TempDir()
			writeFiles(t, dir, tc.files)
			writeFiles(t, otherDir, map[string]string{"x.txt": "another corpus", "y.txt": "altogether"})
			load := func(paths []string, tok tokenizer.Tokenizer, frac float64) (train, val *Tokens) {
				t.Helper()
				c, err := NewCorpus(paths...)
				if err != nil {
					t.Fatal(err)
				}
				train, val, err = Load(context.Background(), c, tok, Options{CacheDir: cache, ValFraction: frac})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { train.Close(); val.Close() })
				return train, val
			}

			// What must stay: token files of another corpus, of
			// the corpus with another tokenizer or validation
			// fraction, and of the corpus by another path (a
			// glob), all built before the change; and files that
			// look like ours but are not provably so.
			load([]string{otherDir}, tokenizer.Byte, 0)
			load([]string{dir}, gpt2(t), 0)
			load([]string{dir}, tokenizer.Byte, 0.4)
			load([]string{filepath.Join(dir, "*")}, tokenizer.Byte, 0)
			oldTrain, oldVal := load([]string{dir}, tokenizer.Byte, 0)
			oldText := decode(t, tokenizer.Byte, append(readAll(t, oldTrain), readAll(t, oldVal)...))
			old := map[string]bool{oldTrain.Path(): true, oldVal.Path(): true}
			prefix := filepath.Base(oldTrain.Path())[:len("tokens-byte-0123456789abcdef-")]
			outside := filepath.Join(t.TempDir(), "outside.bin")
			copyFile(t, oldTrain.Path(), outside)
			notOurs := map[string]string{
				prefix + "train-" + strings.Repeat("0", 24) + ".bin.tmp123": "a build under way",
				prefix + "val-" + strings.Repeat("1", 24) + ".bin":          "no token file",
				prefix + "val-" + strings.Repeat("2", 23) + ".bin":          "PSKTOKS\x00 but a short hash",
				prefix + "tval-" + strings.Repeat("3", 24) + ".bin":         "PSKTOKS\x00 but no split",
				"tokens-byte-train-" + strings.Repeat("4", 24) + ".bin":     "PSKTOKS\x00 of version 1, whose corpus is unknown",
			}
			writeFiles(t, cache, notOurs)
			link := filepath.Join(cache, prefix+"all-"+strings.Repeat("5", 24)+".bin")
			if err := os.Symlink(outside, link); err != nil {
				t.Fatal(err)
			}
			before := listDir(t, cache)

			tc.change(t, dir)
			newTrain, newVal := load([]string{dir}, tokenizer.Byte, 0)
			after := listDir(t, cache)

			// The files of the earlier state are gone, unless the
			// change left them as they were, and the new ones are
			// there; nothing else changed.
			for p := range old {
				if p == newTrain.Path() || p == newVal.Path() {
					delete(old, p)
				}
			}
			if len(old) == 0 {
				t.Fatal("the change made no new token file, so the test tests nothing")
			}
			want := map[string]bool{}
			for _, name := range before {
				if !old[filepath.Join(cache, name)] {
					want[name] = true
				}
			}
			want[filepath.Base(newTrain.Path())] = true
			want[filepath.Base(newVal.Path())] = true
			if got := slices.Sorted(maps.Keys(want)); !slices.Equal(after, got) {
				t.Errorf("cache after the change holds\n%q\nwant\n%q", after, got)
			}
			if _, err := os.Stat(outside); err != nil {
				t.Errorf("the token file a link in the cache points to: %v", err)
			}

			// Tokens open before still read the removed files.
			if got := decode(t, tokenizer.Byte, append(readAll(t, oldTrain), readAll(t, oldVal)...)); got != oldText {
				t.Errorf("tokens of the removed files read %q, want %q", got, oldText)
			}
		})
	}
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// listDir returns the names in dir, sorted.
func listDir(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestLoadKeepsCorpusChangedByCaller changes the files of a corpus that
// NewCorpus listed: it is no longer the corpus of those paths, so its
// token files replace none of theirs.
func TestLoadKeepsCorpusChangedByCaller(t *testing.T) {
	dir, cache := t.TempDir(), t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "alpha beta", "b.txt": "gamma", "c.txt": "delta", "d.txt": "epsilon"})
	c, err := NewCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	load := func(c *Corpus) {
		t.Helper()
		train, val, err := Load(context.Background(), c, tokenizer.Byte, Options{CacheDir: cache, ValFraction: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		train.Close()
		val.Close()
	}
	load(c)
	before := listDir(t, cache)
	part := *c
	part.Files = slices.DeleteFunc(slices.Clone(c.Files), func(f File) bool { return f.Name == "a.txt" || f.Name == "c.txt" })
	load(&part)
	after := listDir(t, cache)
	for _, name := range before {
		if !slices.Contains(after, name) {
			t.Errorf("loading part of the corpus removed %s", name)
		}
	}
	if len(after) <= len(before) {
		t.Errorf("cache holds %q after loading part of the corpus, want more than %q", after, before)
	}
}

func TestCacheCorruption(t *testing.T) {
	dir := t.TempDir()
	text := "Some text, long enough to hold a few tokens. Ünïcödé too.\n"
	writeFiles(t, dir, map[string]string{"a.txt": text})
	c, err := NewCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	g := gpt2(t)
	for _, tc := range []struct {
		name    string
		corrupt func(b []byte) []byte
	}{
		{"empty", func(b []byte) []byte { return nil }},
		{"half a header", func(b []byte) []byte { return b[:headerSize/2] }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }},
		{"extended", func(b []byte) []byte { return append(b, 0, 0) }},
		{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"future version", func(b []byte) []byte { b[8] = 9; return b }},
		{"other width", func(b []byte) []byte { b[12] = 4; return b }},
		{"other vocabulary", func(b []byte) []byte { b[16]++; return b }},
		{"other tokenizer", func(b []byte) []byte { copy(b[32:], "byte\x00"); return b }},
		{"huge count", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[24:], 1<<62); return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			train, val, err := Load(context.Background(), c, g, Options{CacheDir: cache})
			if err != nil {
				t.Fatal(err)
			}
			path := train.Path()
			train.Close()
			val.Close()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.corrupt(b), 0o644); err != nil {
				t.Fatal(err)
			}
			var l logs
			train, val, err = Load(context.Background(), c, g, Options{CacheDir: cache, Logf: l.logf})
			if err != nil {
				t.Fatal(err)
			}
			defer train.Close()
			defer val.Close()
			if !l.has("invalid token file") || !l.has("rebuilding") {
				t.Errorf("log %q does not tell of a rebuild", l)
			}
			if got := decode(t, g, append(readAll(t, train), readAll(t, val)...)); got != text {
				t.Errorf("after rebuilding: %q, want %q", got, text)
			}
		})
	}

	// A token outside the vocabulary is found when read, not trusted.
	cache := t.TempDir()
	train, val, err := Load(context.Background(), c, g, Options{CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	val.Close()
	f, err := os.OpenFile(train.Path(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xff}, headerSize+2*3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = train.Copy(make([]int32, train.Len()), 0)
	if err == nil || !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), "65535") {
		t.Errorf("reading a corrupt token: %v", err)
	}
	train.Close()
}

// TestEncodeChunks checks that cutting files into chunks, and the number
// of workers, change nothing: the tokens are those of each whole file,
// with GPT-2's end-of-text token between files with text, unless a chunk
// had to be cut where there was no space.
func TestEncodeChunks(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	random := make([]byte, 3000)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	src := goFiles(t, "fmt", 3)
	writeFiles(t, dir, map[string]string{
		"0-empty":      "",
		"1.go":         src[0],
		"2.go":         src[1],
		"3.go":         src[2],
		"4-empty":      "",
		"5-tiny":       "x",
		"6-random.bin": string(random),
		"7-unicode":    strings.Repeat("日本語 テキスト\n", 100),
		"8-nospaces":   strings.Repeat("€", 1000), // forces cuts in small chunks
		"9-literal":    "the text <|endoftext|> is no separator",
		"9-zempty":     "",
	})
	c, err := NewCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tok tokenizer.Tokenizer
		sep []int32 // between documents
	}{
		{tokenizer.Byte, nil},
		{gpt2(t), []int32{50256}},
	} {
		tok := tc.tok
		var want []int32
		docs := 0
		for _, f := range c.Files {
			b, err := os.ReadFile(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) == 0 {
				continue
			}
			if docs > 0 {
				want = append(want, tc.sep...)
			}
			want, _ = tok.Encode(context.Background(), want, b)
			docs++
		}
		var first []byte
		for _, size := range []int{16, 100, 4096, chunkSize} {
			for _, workers := range []int{1, 2, 5} {
				path := filepath.Join(t.TempDir(), "tokens")
				tk, forced := encodeTo(t, path, c, tok, size, workers)
				got := readAll(t, tk)
				tk.Close()
				if decoded := decode(t, tok, got); decoded != contents(t, c, tok) {
					t.Fatalf("%s, chunks of %d, %d workers: tokens do not decode to the corpus", tok.Name(), size, workers)
				}
				if tc.sep != nil {
					if n := count(got, tc.sep[0]); n != docs-1 {
						t.Errorf("%s, chunks of %d, %d workers: %d separators between %d documents", tok.Name(), size, workers, n, docs)
					}
				}
				if size >= 4096 && forced > 0 {
					t.Errorf("%s, chunks of %d: %d forced cuts", tok.Name(), size, forced)
				}
				if (forced == 0 || tok == tokenizer.Byte) && !slices.Equal(got, want) {
					t.Errorf("%s, chunks of %d, %d workers: %d tokens differ from the %d of whole files", tok.Name(), size, workers, len(got), len(want))
				}
				if size == 16 && forced == 0 {
					t.Errorf("chunks of 16: no forced cuts, so the test does not test them")
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if workers == 1 {
					first = b
				} else if !bytes.Equal(b, first) {
					t.Errorf("%s, chunks of %d: %d workers give another token file than 1", tok.Name(), size, workers)
				}
			}
		}
	}
}

func count(ids []int32, id int32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// TestEncodeSeparators checks where the end-of-text token goes, exactly,
// whatever the chunks: between documents, that is files with text, and
// nowhere else. Chunks of a few bytes cut documents at every place: before
// their first byte, in their middle, with or without a space to cut at.
func TestEncodeSeparators(t *testing.T) {
	for _, tc := range []struct {
		name string
		docs []string
		want string // the tokens, 256 written as '|'
	}{
		{"one document", []string{"just one"}, "just one"},
		{"two", []string{"ab cd", "ef"}, "ab cd|ef"},
		{"empty files are no documents", []string{"", "a", "", "", "b c", ""}, "a|b c"},
		{"only empty files but one", []string{"", "x", ""}, "x"},
		{"a document that starts with no space to cut at", []string{"ab cd", "efghij kl mn op", "x"}, "ab cd|efghij kl mn op|x"},
		{"no spaces", []string{"abcdefghijklmnopqrstuvwxyz", "0123456789", "ABCDEFGHIJ"}, "abcdefghijklmnopqrstuvwxyz|0123456789|ABCDEFGHIJ"},
		{"one-byte documents", []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}, "a|b|c|d|e|f|g|h|i"},
		{"spaces", []string{" ", "  a ", "b  ", " c"}, " |  a |b  | c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{}
			for i, d := range tc.docs {
				files[fmt.Sprintf("%02d", i)] = d
			}
			writeFiles(t, dir, files)
			c, err := NewCorpus(dir)
			if err != nil {
				t.Fatal(err)
			}
			var want []int32
			for _, b := range []byte(tc.want) {
				if b == '|' {
					want = append(want, 256)
				} else {
					want = append(want, int32(b))
				}
			}
			for _, size := range []int{1, 2, 3, 5, 8, 13, 1 << 10} {
				for _, workers := range []int{1, 3} {
					tk, _ := encodeTo(t, filepath.Join(t.TempDir(), "tokens"), c, sepTokenizer{}, size, workers)
					if got := readAll(t, tk); !slices.Equal(got, want) {
						t.Errorf("chunks of %d, %d workers: %v, want %v", size, workers, got, want)
					}
					tk.Close()
				}
			}
		})
	}
}

// encodeTo tokenizes c into a token file at path and opens it.
func encodeTo(t testing.TB, path string, c *Corpus, tok tokenizer.Tokenizer, size, workers int) (tk *Tokens, forced int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newTokenWriter(f, tok)
	if err != nil {
		t.Fatal(err)
	}
	forced, err = encodeFiles(context.Background(), c.Files, c.records(), tok, w, size, workers)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	tk, err = openTokens(path, tok, "test tokens")
	if err != nil {
		t.Fatal(err)
	}
	return tk, forced
}

// goFiles returns the text of n files of a package of the Go source tree.
func goFiles(t testing.TB, pkg string, n int) []string {
	t.Helper()
	c, err := GoSource()
	if err != nil {
		t.Skip(err)
	}
	var texts []string
	for _, f := range c.Files {
		if strings.HasPrefix(f.Name, pkg+"/") && !strings.Contains(f.Name[len(pkg)+1:], "/") {
			b, err := os.ReadFile(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			texts = append(texts, string(b))
			if len(texts) == n {
				return texts
			}
		}
	}
	t.Fatalf("Go source has fewer than %d files in %s", n, pkg)
	return nil
}

func TestCutPoint(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int
	}{
		{"", 0},
		{"abc", 0},
		{" abc", 0},
		{"a b c", 3},
		{"a  ", 1},
		{"x\n y", 0},
		{"é b", 0}, // not after a multi-byte character
		{"a\x7f b", 0},
		{"f(x) {", 4},
	} {
		if got := cutPoint([]byte(tc.text)); got != tc.want {
			t.Errorf("cutPoint(%q) = %d, want %d", tc.text, got, tc.want)
		}
	}
	for _, tc := range []struct {
		text string
		want int
	}{
		{"abc", 3},
		{"ab€", 5},
		{"ab\xe2\x82", 2},
		{"ab\xe2", 2},
		{"\xe2", 1},
		{"a\xff", 2},
	} {
		if got := forcedCut([]byte(tc.text)); got != tc.want {
			t.Errorf("forcedCut(%q) = %d, want %d", tc.text, got, tc.want)
		}
	}
}

// TestLoadGoSource tokenizes a small part of the default corpus under
// -short and all of it otherwise.
func TestLoadGoSource(t *testing.T) {
	c, err := GoSource()
	if err != nil {
		t.Fatal(err)
	}
	frac := DefaultValFraction
	if testing.Short() {
		var part []File
		for _, f := range c.Files {
			if strings.HasPrefix(f.Name, "strings/") || strings.HasPrefix(f.Name, "unicode/") {
				part = append(part, f)
			}
		}
		c = &Corpus{Desc: c.Desc + " (strings and unicode)", Files: part}
		// With a few dozen files, 5% might be no file.
		frac = 0.2
	}
	for _, tok := range []tokenizer.Tokenizer{tokenizer.Byte, gpt2(t)} {
		var l logs
		train, val, err := Load(context.Background(), c, tok, Options{CacheDir: t.TempDir(), ValFraction: frac, Logf: l.logf})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range l {
			t.Log(m)
		}
		trainFiles, valFiles := c.Split(frac)
		if tok == tokenizer.Byte && (train.Len() != trainFiles.Bytes() || val.Len() != valFiles.Bytes()) {
			t.Errorf("byte tokens: %d + %d, want %d + %d", train.Len(), val.Len(), trainFiles.Bytes(), valFiles.Bytes())
		}
		if got, want := decode(t, tok, readAll(t, val)), contents(t, valFiles, tok); got != want {
			t.Errorf("%s: validation tokens do not decode to the validation files", tok.Name())
		}
		train.Close()
		val.Close()
	}
}

// TestTokensClose closes views of one token file in turn: each is closed
// on its own, and the file when the last is.
func TestTokensClose(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"only.txt": "0123456789abcdefghij"})
	c, err := NewCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	train, val, err := Load(context.Background(), c, tokenizer.Byte, Options{CacheDir: t.TempDir(), ValFraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if train.f != val.f {
		t.Fatal("the split by position opened the token file twice")
	}
	if err := train.Close(); err != nil {
		t.Fatal(err)
	}
	if err := train.Close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("second Close: %v, want os.ErrClosed", err)
	}
	if err := train.Copy(make([]int32, 1), 0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Copy after Close: %v, want os.ErrClosed", err)
	}
	if got := decode(t, tokenizer.Byte, readAll(t, val)); got != "abcdefghij" {
		t.Errorf("validation tokens after closing the training ones: %q", got)
	}
	if err := val.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := val.f.file.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("token file after closing both views: %v, want it closed", err)
	}
}

func TestOpenPaths(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.jsonl")
	if err := os.WriteFile(path, []byte(`{"body": "hello"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := OpenPaths([]string{path}, "body")
	if err != nil {
		t.Fatal(err)
	}
	if c.TextField != "body" || len(c.Files) != 1 {
		t.Errorf("OpenPaths: field %q, %d files; want body, 1", c.TextField, len(c.Files))
	}
	if want := c.Desc + ": 1 file, 0.0 MB"; c.Summary() != want {
		t.Errorf("Summary: %q, want %q", c.Summary(), want)
	}
	if _, err := OpenPaths([]string{filepath.Join(dir, "missing")}, ""); err == nil {
		t.Error("OpenPaths of a missing file: no error")
	}
	var logged []string
	logf := func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }
	tr, val, err := LoadPaths(context.Background(), []string{path}, "body", tokenizer.Byte, Options{CacheDir: t.TempDir(), Logf: logf, ValFraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	defer val.Close()
	if n := tr.Len() + val.Len(); n < 5 {
		t.Errorf("LoadPaths: %d tokens of the field's text, want at least 5", n)
	}
	if len(logged) == 0 || logged[0] != "corpus: "+c.Summary() {
		t.Errorf("LoadPaths logged %q first, want the corpus's summary", logged)
	}
}

// stopTokenizer is the byte tokenizer that cancels its context the first
// time it encodes, as a signal would while a corpus is tokenized.
type stopTokenizer struct {
	tokenizer.Tokenizer
	cancel context.CancelFunc
}

func (s stopTokenizer) Encode(ctx context.Context, dst []int32, text []byte) ([]int32, error) {
	s.cancel()
	<-ctx.Done()
	return dst, ctx.Err()
}

// TestLoadCanceled stops a tokenization under way: Load must return the
// context's error and leave no temporary token file behind, rather than
// one that waits a day for the sweep of stale files.
func TestLoadCanceled(t *testing.T) {
	dir, cache := t.TempDir(), t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "some text", "b.txt": "more text"})
	c, err := NewCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, _, err = Load(ctx, c, stopTokenizer{tokenizer.Byte, cancel}, Options{CacheDir: cache})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Load stopped: %v, want context.Canceled", err)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "*")); len(left) > 0 {
		t.Errorf("files left in the cache directory: %q", left)
	}
}
