package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
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

// contents returns the files' texts, concatenated in corpus order.
func contents(t testing.TB, c *Corpus) string {
	t.Helper()
	var sb strings.Builder
	for _, f := range c.Files {
		b, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		sb.Write(b)
	}
	return sb.String()
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
			train, val, err := Load(c, tok, Options{CacheDir: t.TempDir(), ValFraction: frac})
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
				if got, want := decode(t, tok, readAll(t, tc.tokens)), contents(t, tc.files); got != want {
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
			train, val, err := Load(c, tok, Options{CacheDir: t.TempDir(), ValFraction: frac, Logf: l.logf})
			if err != nil {
				t.Fatal(err)
			}
			all := tok.Encode(nil, []byte(text))
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
			_, _, err := Load(c, tokenizer.Byte, tc.opt)
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
			_, _, err = Load(c, tokenizer.Byte, Options{CacheDir: cache})
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
		train, val, err := Load(c, tokenizer.Byte, Options{CacheDir: cache, Logf: l.logf})
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

	// A change of content and time makes a new token file.
	writeFiles(t, dir, map[string]string{"b.txt": "changed file"})
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "b.txt"), later, later); err != nil {
		t.Fatal(err)
	}
	text, l = load()
	if text != "first filechanged file" || !l.has("tokenized") {
		t.Fatalf("after a change: %q, log %q", text, l)
	}
	if got := cacheFiles(); len(got) <= len(first) || !slices.Contains(got, first[0]) {
		t.Fatalf("cache holds %q after a change, want the old files %q and a new one", got, first)
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
			train, val, err := Load(c, g, Options{CacheDir: cache})
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
			train, val, err = Load(c, g, Options{CacheDir: cache, Logf: l.logf})
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
	train, val, err := Load(c, g, Options{CacheDir: cache})
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
// unless a chunk had to be cut where there was no space.
func TestEncodeChunks(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	random := make([]byte, 3000)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	src := goFiles(t, "fmt", 3)
	writeFiles(t, dir, map[string]string{
		"1.go":         src[0],
		"2.go":         src[1],
		"3.go":         src[2],
		"4-empty":      "",
		"5-tiny":       "x",
		"6-random.bin": string(random),
		"7-unicode":    strings.Repeat("日本語 テキスト\n", 100),
		"8-nospaces":   strings.Repeat("€", 1000), // forces cuts in small chunks
	})
	c, err := NewCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []tokenizer.Tokenizer{tokenizer.Byte, gpt2(t)} {
		var want []int32
		for _, f := range c.Files {
			b, err := os.ReadFile(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			want = tok.Encode(want, b)
		}
		var first []byte
		for _, size := range []int{16, 100, 4096, chunkSize} {
			for _, workers := range []int{1, 2, 5} {
				path := filepath.Join(t.TempDir(), "tokens")
				tk, forced := encodeTo(t, path, c, tok, size, workers)
				got := readAll(t, tk)
				tk.Close()
				if decoded := decode(t, tok, got); decoded != contents(t, c) {
					t.Fatalf("%s, chunks of %d, %d workers: tokens do not decode to the corpus", tok.Name(), size, workers)
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
	forced, err = encodeFiles(c.Files, tok, w, size, workers)
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
		train, val, err := Load(c, tok, Options{CacheDir: t.TempDir(), ValFraction: frac, Logf: l.logf})
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
		if got, want := decode(t, tok, readAll(t, val)), contents(t, valFiles); got != want {
			t.Errorf("%s: validation tokens do not decode to the validation files", tok.Name())
		}
		train.Close()
		val.Close()
	}
}
