package data

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/polysketch/polysketch/data/tokenizer"
)

// Options configure Load.
type Options struct {
	// CacheDir is where token files are kept; "" means DefaultCacheDir().
	CacheDir string
	// ValFraction is the share of the corpus held out for validation, in
	// (0, 1); 0 means DefaultValFraction.
	ValFraction float64
	// Logf, if not nil, is told what Load does: cache hits, rebuilds and
	// tokenization throughput.
	Logf func(format string, args ...any)
}

// DefaultValFraction is the share of a corpus held out for validation.
const DefaultValFraction = 0.05

// DefaultCacheDir returns the default directory for token files:
// polysketch in the user's cache directory.
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no directory for cached tokens (%v): set $XDG_CACHE_HOME or $HOME, or give a cache directory", err)
	}
	return filepath.Join(dir, "polysketch"), nil
}

// Load tokenizes the corpus and returns its training and validation tokens,
// which the caller must close.
//
// Files are split by Corpus.Split. If one side would get no text (a corpus
// of one file, say), the whole corpus is tokenized as one stream instead,
// and its last ValFraction of tokens (at least one) are the validation
// tokens.
//
// Each split is tokenized once, file after file and never as a whole in
// memory, into a token file under the cache directory, named by a hash of
// the tokenizer, the split and the files' paths, sizes and modification
// times: a changed corpus is tokenized again. A token file that is
// unreadable or inconsistent with its header is rebuilt.
func Load(c *Corpus, tok tokenizer.Tokenizer, opt Options) (train, val *Tokens, err error) {
	frac := opt.ValFraction
	if frac == 0 {
		frac = DefaultValFraction
	}
	if !(frac > 0 && frac < 1) {
		return nil, nil, fmt.Errorf("validation fraction %v is not between 0 and 1", opt.ValFraction)
	}
	dir := opt.CacheDir
	if dir == "" {
		if dir, err = DefaultCacheDir(); err != nil {
			return nil, nil, err
		}
	}
	if err := c.checkNotEmpty(); err != nil {
		return nil, nil, err
	}
	l := loader{dir: dir, tok: tok, logf: opt.Logf}
	if l.logf == nil {
		l.logf = func(string, ...any) {}
	}

	trainFiles, valFiles := c.Split(frac)
	if trainFiles.Bytes() > 0 && valFiles.Bytes() > 0 {
		if train, err = l.load(trainFiles, "train"); err != nil {
			return nil, nil, err
		}
		if val, err = l.load(valFiles, "val"); err != nil {
			train.Close()
			return nil, nil, err
		}
		return train, val, nil
	}

	all, err := l.load(c, "all")
	if err != nil {
		return nil, nil, err
	}
	defer all.Close()
	n := all.Len()
	if n < 2 {
		return nil, nil, fmt.Errorf("corpus %s has %s, too few to split into training and validation: add text", c.Desc, plural(int(n), "token"))
	}
	nv := min(max(int64(math.Ceil(frac*float64(n))), 1), n-1)
	l.logf("%s: the split by file leaves one side empty; holding out its last %d of %d tokens for validation", c.Desc, nv, n)
	if train, err = all.slice(0, n-nv, c.Desc+" (training split: first tokens)"); err != nil {
		return nil, nil, err
	}
	if val, err = all.slice(n-nv, n, c.Desc+" (validation split: last tokens)"); err != nil {
		train.Close()
		return nil, nil, err
	}
	return train, val, nil
}

type loader struct {
	dir  string
	tok  tokenizer.Tokenizer
	logf func(string, ...any)
}

// load returns the tokens of c, from the cache or freshly made.
func (l *loader) load(c *Corpus, split string) (*Tokens, error) {
	path, err := l.path(c, split)
	if err != nil {
		return nil, err
	}
	t, err := openTokens(path, l.tok, c.Desc)
	if err == nil {
		l.logf("%s: %d %s tokens from %s", c.Desc, t.Len(), l.tok.Name(), path)
		return t, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		l.logf("%v; rebuilding it", err)
	}
	if err := l.build(c, path); err != nil {
		return nil, err
	}
	t, err = openTokens(path, l.tok, c.Desc)
	if err != nil {
		return nil, fmt.Errorf("token file just written is unusable: %w", err)
	}
	return t, nil
}

// path returns the token file for c: a hash of everything its tokens
// depend on.
func (l *loader) path(c *Corpus, split string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "polysketch tokens v%d, chunks of %d\n%s %d\n%s\n", version, chunkSize, l.tok.Name(), l.tok.VocabSize(), split)
	for _, f := range c.Files {
		abs, err := filepath.Abs(f.Path)
		if err != nil {
			return "", fmt.Errorf("corpus file %q: %w", f.Path, err)
		}
		fmt.Fprintf(h, "%q %q %d %d\n", abs, f.Name, f.Size, f.ModTime.UnixNano())
	}
	name := fmt.Sprintf("tokens-%s-%s-%x.bin", l.tok.Name(), split, h.Sum(nil)[:12])
	return filepath.Join(l.dir, name), nil
}

// build tokenizes c into a new token file at path, atomically: readers see
// either no file or a whole one.
func (l *loader) build(c *Corpus, path string) (err error) {
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return pathError("cannot create cache directory", l.dir, err)
	}
	removeStale(l.dir)
	f, err := os.CreateTemp(l.dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return pathError("cannot write to cache directory", l.dir, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	start := time.Now()
	w, err := newTokenWriter(f, l.tok)
	if err != nil {
		return pathError("cannot write token file", f.Name(), err)
	}
	forced, err := encodeFiles(c.Files, l.tok, w, chunkSize, runtime.GOMAXPROCS(0))
	if err != nil {
		return err
	}
	if forced > 0 {
		l.logf("%s: %d chunks of %d bytes had no space to cut at; tokens next to those cuts may differ from those of whole files", c.Desc, forced, chunkSize)
	}
	if err := w.finish(); err != nil {
		return pathError("cannot write token file", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return pathError("cannot write token file", f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return pathError("cannot write token file", path, err)
	}
	d := time.Since(start)
	l.logf("%s: tokenized %d files, %.1f MB, into %d %s tokens in %.1fs (%.1f MB/s): %s",
		c.Desc, len(c.Files), float64(c.Bytes())/1e6, w.n, l.tok.Name(), d.Seconds(), float64(c.Bytes())/1e6/d.Seconds(), path)
	return nil
}

// removeStale removes the temporary files of builds that stopped, killed,
// more than a day ago.
func removeStale(dir string) {
	tmp, _ := filepath.Glob(filepath.Join(dir, "tokens-*.tmp*"))
	for _, p := range tmp {
		if info, err := os.Stat(p); err == nil && time.Since(info.ModTime()) > 24*time.Hour {
			os.Remove(p)
		}
	}
}
