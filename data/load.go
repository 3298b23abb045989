package data

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/regular"
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
	// MaxRecord is the record limit (Corpus.MaxRecord) of the corpus
	// that LoadPaths opens.
	MaxRecord int64
}

// OpenPaths returns the corpus NewCorpus makes of paths, or the Go
// source tree (GoSource) if there are none, whose records keep their text
// in field ("" for "text"): the one way every command turns its --corpus
// into a Corpus.
func OpenPaths(paths []string, field string) (c *Corpus, err error) {
	if len(paths) == 0 {
		c, err = GoSource()
	} else {
		c, err = NewCorpus(paths...)
	}
	if err != nil {
		return nil, err
	}
	c.TextField = field
	return c, nil
}

// Summary describes c in one line: its paths, files and size.
func (c *Corpus) Summary() string {
	files := fmt.Sprintf("%d files", len(c.Files))
	if len(c.Files) == 1 {
		files = "1 file"
	}
	return fmt.Sprintf("%s: %s, %.1f MB", c.Desc, files, float64(c.Bytes())/1e6)
}

// LoadPaths is Load of the corpus OpenPaths makes of paths and field. It
// tells opt.Logf what the corpus holds before reading it.
func LoadPaths(ctx context.Context, paths []string, field string, tok tokenizer.Tokenizer, opt Options) (train, val *Tokens, err error) {
	c, err := OpenPaths(paths, field)
	if err != nil {
		return nil, nil, err
	}
	c.MaxRecord = opt.MaxRecord
	if opt.Logf != nil {
		opt.Logf("corpus: %s", c.Summary())
		if note := c.BinaryNote(); note != "" {
			opt.Logf("corpus: %s", note)
		}
	}
	return Load(ctx, c, tok, opt)
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
// tokens. Each file is a document: if the tokenizer has an end-of-text
// token (tokenizer.EndOfText), as GPT-2's does, it goes between one
// document and the next; the byte tokenizer has none, so its documents are
// simply concatenated.
//
// Each split is tokenized once, file after file and never as a whole in
// memory, into a token file under the cache directory, named by the
// tokenizer, the corpus, the split and a hash of the files' paths, sizes
// and modification times: a changed corpus is tokenized again. A token file that is
// unreadable or inconsistent with its header is rebuilt.
//
// Token files of the corpus's earlier states are removed when it is
// tokenized again: those of the same tokenizer and validation fraction and
// of a corpus made by NewCorpus from the same paths, by GoSource from the
// same tree, or else of the same files. Other files in the cache directory
// are left alone.
//
// Tokenizing stops with ctx's error when ctx is done, removing the token
// file it was writing.
func Load(ctx context.Context, c *Corpus, tok tokenizer.Tokenizer, opt Options) (train, val *Tokens, err error) {
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
	if l.prefix, err = filePrefix(c, tok, frac); err != nil {
		return nil, nil, err
	}

	trainFiles, valFiles := c.Split(frac)
	if trainFiles.Bytes() > 0 && valFiles.Bytes() > 0 {
		if train, err = l.load(ctx, trainFiles, "train"); err != nil {
			return nil, nil, err
		}
		if val, err = l.load(ctx, valFiles, "val"); err != nil {
			train.Close()
			return nil, nil, err
		}
		l.removeReplaced(train, val)
		return train, val, nil
	}

	all, err := l.load(ctx, c, "all")
	if err != nil {
		return nil, nil, err
	}
	defer all.Close()
	n := all.Len()
	if n < 2 {
		return nil, nil, fmt.Errorf("corpus %s has %s, too few to split into training and validation: add text", c.Desc, plural(int(n), "token"))
	}
	l.removeReplaced(all)
	nv := min(max(int64(math.Ceil(frac*float64(n))), 1), n-1)
	l.logf("%s: the split by file leaves one side empty; holding out its last %d of %d tokens for validation", c.Desc, nv, n)
	train = all.slice(0, n-nv, c.Desc+" (training split: first tokens)")
	val = all.slice(n-nv, n, c.Desc+" (validation split: last tokens)")
	return train, val, nil
}

type loader struct {
	dir    string
	tok    tokenizer.Tokenizer
	logf   func(string, ...any)
	prefix string // of the names of the corpus's token files; see filePrefix
	built  bool   // whether a token file was made
}

// filePrefix returns the start of the names of c's token files: the
// tokenizer's name and a hash of what stays the same while the corpus
// changes, so that the files of its earlier states can be told from those
// of other corpora. The hash covers the validation fraction, on which the
// split depends, and where c was listed from, or, if that is unknown or c
// no longer lists the files found there, the files' paths.
func filePrefix(c *Corpus, tok tokenizer.Tokenizer, frac float64) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "polysketch corpus, validation fraction %v\n", frac)
	if c.hasRecords() {
		// Another field is another corpus, whose tokens stay.
		fmt.Fprintf(h, "text field %q\n", c.textField())
	}
	if c.origin != "" && c.listed == pathsDigest(c.Files) {
		fmt.Fprintf(h, "%s\n", c.origin)
	} else {
		for _, f := range c.Files {
			abs, err := filepath.Abs(f.Path)
			if err != nil {
				return "", fmt.Errorf("corpus file %q: %w", f.Path, err)
			}
			fmt.Fprintf(h, "%q\n", abs)
		}
	}
	return fmt.Sprintf("tokens-%s-%x-", tok.Name(), h.Sum(nil)[:8]), nil
}

// load returns the tokens of c, from the cache or freshly made.
func (l *loader) load(ctx context.Context, c *Corpus, split string) (*Tokens, error) {
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
	return l.build(ctx, c, path)
}

// path returns the token file for c: l.prefix, the split and a hash of
// everything its tokens depend on.
func (l *loader) path(c *Corpus, split string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "polysketch tokens v%d, chunks of %d\n%s %d\n%s\n", version, chunkSize, l.tok.Name(), l.tok.VocabSize(), split)
	if eot, ok := tokenizer.EndOfText(l.tok); ok {
		fmt.Fprintf(h, "documents separated by %d\n", eot)
	}
	for _, f := range c.Files {
		abs, err := filepath.Abs(f.Path)
		if err != nil {
			return "", fmt.Errorf("corpus file %q: %w", f.Path, err)
		}
		fmt.Fprintf(h, "%q %q %d %d\n", abs, f.Name, f.Size, f.ModTime.UnixNano())
		if f.Format != Text {
			fmt.Fprintf(h, "format %v\n", f.Format)
		}
	}
	if c.hasRecords() {
		fmt.Fprintf(h, "text field %q\n", c.textField())
	}
	name := fmt.Sprintf("%s%s-%x.bin", l.prefix, split, h.Sum(nil)[:12])
	return filepath.Join(l.dir, name), nil
}

// tokenFileName matches what follows the prefix in the name of a token
// file that path makes.
var tokenFileName = regexp.MustCompile(`^(train|val|all)-[0-9a-f]{24}\.bin$`)

// build tokenizes c into a new token file at path, atomically: readers see
// either no file or a whole one. It returns the file's tokens.
func (l *loader) build(ctx context.Context, c *Corpus, path string) (t *Tokens, err error) {
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return nil, pathError("cannot create cache directory", l.dir, err)
	}
	removeStale(l.dir)
	f, err := os.CreateTemp(l.dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, pathError("cannot write to cache directory", l.dir, err)
	}
	renamed := false
	defer func() {
		if err != nil && !renamed {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	start := time.Now()
	w, err := newTokenWriter(f, l.tok)
	if err != nil {
		return nil, pathError("cannot write token file", f.Name(), err)
	}
	forced, err := encodeFiles(ctx, c.Files, c.records(), l.tok, w, chunkSize, runtime.GOMAXPROCS(0))
	if err != nil {
		return nil, err
	}
	if forced > 0 {
		l.logf("%s: %d chunks of %d bytes had no space to cut at; tokens next to those cuts may differ from those of whole files", c.Desc, forced, chunkSize)
	}
	if err := w.finish(); err != nil {
		return nil, pathError("cannot write token file", f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return nil, pathError("cannot write token file", path, err)
	}
	renamed = true
	// The tokens are read through f, which stays the file just written
	// even if another process removes or replaces path.
	if t, err = useTokens(f, path, l.tok, c.Desc); err != nil {
		return nil, fmt.Errorf("token file just written is unusable: %w", err)
	}
	l.built = true
	d := time.Since(start)
	l.logf("%s: tokenized %s, %.1f MB, into %d %s tokens in %.1fs (%.1f MB/s): %s",
		c.Desc, plural(len(c.Files), "file"), float64(c.Bytes())/1e6, w.n, l.tok.Name(), d.Seconds(), float64(c.Bytes())/1e6/d.Seconds(), path)
	return t, nil
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

// removeReplaced removes, if Load built a token file, the token files of
// earlier states of the corpus, which keep, the files just loaded, replace:
// regular files in the cache directory whose names are l.prefix followed
// by a split and a hash, but none of keep's, and that start as token files
// do. It leaves alone temporary files, which a build under way may be
// writing, token files of other corpora, tokenizers and validation
// fractions, and those of format version 1, whose names do not tell their
// corpus. A process still reading a removed file can go on reading it: on
// Unix its data stay until closed, and elsewhere removing an open file
// fails, which is only logged.
func (l *loader) removeReplaced(keep ...*Tokens) {
	if !l.built {
		return
	}
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		l.logf("cannot look for token files of earlier states of the corpus: %v", err)
		return
	}
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, l.prefix)
		if !ok || !tokenFileName.MatchString(rest) || !e.Type().IsRegular() ||
			slices.ContainsFunc(keep, func(t *Tokens) bool { return filepath.Base(t.Path()) == name }) {
			continue
		}
		path := filepath.Join(l.dir, name)
		if !hasMagic(path) {
			continue
		}
		switch err := os.Remove(path); {
		case err == nil:
			l.logf("removed %s, the tokens of an earlier state of the corpus", path)
		case !errors.Is(err, fs.ErrNotExist): // not removed by another Load meanwhile
			l.logf("cannot remove the tokens of an earlier state of the corpus: %v", err)
		}
	}
}

// hasMagic reports whether the file at path starts as token files do.
func hasMagic(path string) bool {
	f, err := regular.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [len(magic)]byte
	_, err = io.ReadFull(f, b[:])
	return err == nil && string(b[:]) == magic
}
