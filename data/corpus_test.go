package data

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeFiles creates files (path relative to dir → content) under dir.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func names(c *Corpus) []string {
	var n []string
	for _, f := range c.Files {
		n = append(n, f.Name)
	}
	return n
}

func TestNewCorpus(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"b.txt":          "bee",
		"a.txt":          "a",
		"sub/z.md":       "zed",
		"sub/deep/c.txt": "sea",
		".hidden":        "no",
		".git/config":    "no",
		"sub/.swp":       "no",
		"empty.txt":      "",
	})
	at := func(p string) string { return filepath.Join(dir, filepath.FromSlash(p)) }
	for _, tc := range []struct {
		name  string
		paths []string
		want  []string
	}{
		{"directory", []string{dir}, []string{"a.txt", "b.txt", "empty.txt", "sub/deep/c.txt", "sub/z.md"}},
		{"file", []string{at("sub/z.md")}, []string{"z.md"}},
		{"files in order given", []string{at("b.txt"), at("a.txt")}, []string{"b.txt", "a.txt"}},
		{"glob", []string{at("*.txt")}, []string{"a.txt", "b.txt", "empty.txt"}},
		{"glob matching a directory", []string{at("s*")}, []string{"sub/deep/c.txt", "sub/z.md"}},
		{"duplicates listed once", []string{at("a.txt"), dir, at("*.txt")}, []string{"a.txt", "b.txt", "empty.txt", "sub/deep/c.txt", "sub/z.md"}},
		{"hidden file named explicitly", []string{at(".hidden")}, []string{".hidden"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCorpus(tc.paths...)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(c); !slices.Equal(got, tc.want) {
				t.Errorf("names = %q, want %q", got, tc.want)
			}
			for _, f := range c.Files {
				info, err := os.Stat(f.Path)
				if err != nil || info.Size() != f.Size || !info.ModTime().Equal(f.ModTime) {
					t.Errorf("file %s: size %d, time %v; stat says %v, %v", f.Path, f.Size, f.ModTime, info, err)
				}
			}
		})
	}
}

func TestNewCorpusErrors(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "text", "zero/e1": "", "zero/e2": "", "onlyhidden/.x": "hidden"})
	if err := os.Mkdir(filepath.Join(dir, "emptydir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "links"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "links", "broken")); err != nil {
		t.Fatal(err)
	}
	at := func(p string) string { return filepath.Join(dir, p) }
	for _, tc := range []struct {
		name  string
		paths []string
		want  []string // substrings of the error
	}{
		{"no paths", nil, []string{"no corpus paths"}},
		{"missing", []string{at("nope.txt")}, []string{at("nope.txt"), "does not exist"}},
		{"missing among good", []string{at("a.txt"), at("nope")}, []string{at("nope"), "does not exist"}},
		{"glob matches nothing", []string{at("*.csv")}, []string{at("*.csv"), "matches no files"}},
		{"bad glob", []string{at("[.txt")}, []string{at("[.txt"), "syntax error"}},
		{"empty directory", []string{at("emptydir")}, []string{at("emptydir"), "has no files"}},
		{"only hidden files", []string{at("onlyhidden")}, []string{at("onlyhidden"), "has no files"}},
		{"empty files", []string{at("zero")}, []string{at("zero"), "has no text: 2 files, all empty"}},
		{"broken link", []string{at("links")}, []string{at("links/broken"), "broken link"}},
		{"device", []string{os.DevNull}, []string{os.DevNull, "is a device, not a file or directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCorpus(tc.paths...)
			if err == nil {
				t.Fatalf("NewCorpus(%q) = %q, want an error", tc.paths, names(c))
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error has several lines: %q", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

func TestGoRoot(t *testing.T) {
	good := t.TempDir()
	if err := os.Mkdir(filepath.Join(good, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := t.TempDir() // no src
	builtIn := func(s string) func() string { return func() string { return s } }
	env := func(s string, err error) func() (string, error) {
		return func() (string, error) { return s, err }
	}
	for _, tc := range []struct {
		name    string
		builtIn func() string
		env     func() (string, error)
		want    string
		wantErr []string
	}{
		{"built-in root", builtIn(good), env("", errors.New("not called")), good, nil},
		{"empty built-in, go env", builtIn(""), env(good, nil), good, nil},
		{"moved built-in, go env", builtIn(bad), env(good, nil), good, nil},
		{"neither", builtIn(""), env("", errors.New(`exec: "go": executable file not found in $PATH`)), "",
			[]string{"runtime.GOROOT() is empty", "executable file not found", "pass a corpus path"}},
		{"both without src", builtIn(bad), env(bad, nil), "", []string{bad, "no src directory", "set GOROOT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := goRoot(tc.builtIn, tc.env)
			if tc.wantErr == nil {
				if err != nil || got != tc.want {
					t.Errorf("goRoot = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("goRoot = %q, want an error", got)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestSplit(t *testing.T) {
	for _, frac := range []float64{0.05, 0.2, 0.5} {
		c := &Corpus{Desc: "test"}
		for i := range 20000 {
			c.Files = append(c.Files, File{Name: fmt.Sprintf("dir%d/file%d.txt", i%37, i)})
		}
		train, val := c.Split(frac)
		if len(train.Files)+len(val.Files) != len(c.Files) {
			t.Fatalf("split of %d files into %d + %d", len(c.Files), len(train.Files), len(val.Files))
		}
		// Binomial: 20000 files, sd ≤ 71 files = 0.0036.
		if got := float64(len(val.Files)) / float64(len(c.Files)); got < frac-0.015 || got > frac+0.015 {
			t.Errorf("fraction %v: %.4f of files in validation", frac, got)
		}
		// The side of a file depends on its name only.
		sub := &Corpus{Files: slices.Clone(c.Files[5000:7000])}
		slices.Reverse(sub.Files)
		_, subVal := sub.Split(frac)
		for _, f := range subVal.Files {
			if !slices.ContainsFunc(val.Files, func(g File) bool { return g.Name == f.Name }) {
				t.Fatalf("fraction %v: %s is in validation in a subset only", frac, f.Name)
			}
		}
	}
}

// TestGoSource lists and splits the real default corpus; it tokenizes only
// a few files of it (TestLoadGoSource does it all).
func TestGoSource(t *testing.T) {
	c, err := GoSource()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Files) < 1000 || c.Bytes() < 10e6 {
		t.Fatalf("Go source: %d files, %d bytes; want a Go tree", len(c.Files), c.Bytes())
	}
	if !slices.IsSortedFunc(c.Files, func(a, b File) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("files are not sorted by name")
	}
	for _, f := range c.Files {
		if !strings.HasSuffix(f.Name, ".go") || strings.Contains(f.Name, "\\") {
			t.Fatalf("file %q in the Go corpus", f.Name)
		}
	}
	if !slices.Contains(names(c), "fmt/print.go") {
		t.Error("fmt/print.go is not in the Go corpus")
	}
	train, val := c.Split(DefaultValFraction)
	frac := float64(len(val.Files)) / float64(len(c.Files))
	t.Logf("%d files, %.1f MB; %d for training, %d (%.3f) for validation", len(c.Files), float64(c.Bytes())/1e6, len(train.Files), len(val.Files), frac)
	if frac < 0.035 || frac > 0.065 {
		t.Errorf("%.3f of the files are for validation, want about %v", frac, DefaultValFraction)
	}
	train2, val2 := c.Split(DefaultValFraction)
	if !slices.Equal(names(train), names(train2)) || !slices.Equal(names(val), names(val2)) {
		t.Error("splitting twice gives different splits")
	}
}
