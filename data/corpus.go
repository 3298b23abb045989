package data

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/polysketch/polysketch/internal/regular"
)

// A Corpus is an ordered list of text files: plain text, JSON lines or
// Parquet, gzip-compressed or not (see Format).
type Corpus struct {
	// Desc describes the corpus in messages: the paths it was made from.
	Desc  string
	Files []File
	// TextField is the field of JSON lines, and the column of Parquet
	// files, that holds the text; "" means DefaultTextField.
	TextField string
	// MaxRecord is the most bytes one record may have: a JSON-lines
	// line, decompressed, or a Parquet file's text. A longer one is an
	// error naming its file and line, or row and column, as reading it
	// would take memory that grows with it. 0 means DefaultMaxRecord.
	MaxRecord int64
	// Binary lists the files NewCorpus left out as binary data (see
	// Format), by name.
	Binary []string

	// origin says where the files were listed from, the same however
	// they change: NewCorpus's absolute paths, or GoSource's tree. It
	// tells which token files of the cache hold an earlier state of the
	// corpus; "" means unknown. listed is pathsDigest of the files as
	// listed there: if a caller changes Files, origin no longer applies.
	origin string
	listed [sha256.Size]byte
}

// pathsDigest returns a hash of the files' paths.
func pathsDigest(files []File) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%q\n", f.Path)
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// A File is one file of a corpus as it was when the corpus was listed.
type File struct {
	// Path is the file's path on this machine.
	Path string
	// Name is Path relative to the directory or pattern it was found
	// under, with forward slashes: the same on every machine, so that the
	// split, which hashes it, is too.
	Name    string
	Size    int64
	ModTime time.Time
	// Format is how the file holds its text, told by its name.
	Format Format
}

// Bytes returns the total size of the files.
func (c *Corpus) Bytes() int64 {
	var n int64
	for _, f := range c.Files {
		n += f.Size
	}
	return n
}

// NewCorpus lists the files of a corpus made of paths, each a file, a
// directory (all its files, recursively, except those whose names start
// with a dot, and not following links to directories) or a glob pattern
// (filepath.Match syntax; matching directories are walked). Files come in
// the order of paths, those from one path sorted by name; a file reached
// twice is listed once. Each file's name tells its format (see Format);
// text files that look like binary data (an image, say: see isBinary) are
// left out, and listed in Binary.
func NewCorpus(paths ...string) (*Corpus, error) {
	if len(paths) == 0 {
		return nil, errors.New("no corpus paths given: pass files, directories or glob patterns")
	}
	c := &Corpus{Desc: strings.Join(paths, " ")}
	origin := []string{"paths"}
	seen := make(map[string]bool)
	for _, p := range paths {
		files, err := listPath(p)
		if err != nil {
			return nil, err
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("corpus path %q: %w", p, err)
		}
		origin = append(origin, strconv.Quote(abs))
		for _, f := range files {
			abs, err := filepath.Abs(f.Path)
			if err != nil {
				return nil, fmt.Errorf("corpus file %q: %w", f.Path, err)
			}
			if seen[abs] {
				continue
			}
			seen[abs] = true
			if f.Format, err = formatOf(f.Path); err != nil {
				return nil, err
			}
			if (f.Format == Text || f.Format == TextGzip) && f.Size > 0 {
				binary, err := isBinary(f)
				if err != nil {
					return nil, err
				}
				if binary {
					c.Binary = append(c.Binary, f.Name)
					continue
				}
			}
			c.Files = append(c.Files, f)
		}
	}
	if len(c.Files) == 0 && len(c.Binary) > 0 {
		return nil, fmt.Errorf("corpus %s has no text files: %s; pass text, JSON lines or Parquet files", c.Desc, c.BinaryNote())
	}
	if err := c.checkNotEmpty(); err != nil {
		return nil, err
	}
	c.origin, c.listed = strings.Join(origin, " "), pathsDigest(c.Files)
	return c, nil
}

// BinaryNote says which files NewCorpus left out as binary: how many, and
// the first few names; "" if none.
func (c *Corpus) BinaryNote() string {
	if len(c.Binary) == 0 {
		return ""
	}
	const show = 3
	names := strings.Join(c.Binary[:min(len(c.Binary), show)], ", ")
	if len(c.Binary) > show {
		names += ", ..."
	}
	return fmt.Sprintf("skipped %s of binary data (%s)", plural(len(c.Binary), "file"), names)
}

// textField returns the field of records that holds the text.
func (c *Corpus) textField() string {
	if c.TextField == "" {
		return DefaultTextField
	}
	return c.TextField
}

// DefaultMaxRecord is the record limit of a Corpus that sets none.
const DefaultMaxRecord = 64 << 20

func (c *Corpus) maxRecord() int64 {
	if c.MaxRecord <= 0 {
		return DefaultMaxRecord
	}
	return c.MaxRecord
}

// records returns how c's files hold text in records.
func (c *Corpus) records() records { return records{field: c.textField(), max: c.maxRecord()} }

// hasRecords reports whether any file of c holds records (JSON lines,
// Parquet), whose text is in a field.
func (c *Corpus) hasRecords() bool {
	return slices.ContainsFunc(c.Files, func(f File) bool { return f.Format.records() })
}

func (c *Corpus) checkNotEmpty() error {
	if len(c.Files) == 0 {
		return fmt.Errorf("corpus %s has no files: pass files, or directories that contain some", c.Desc)
	}
	if c.Bytes() == 0 {
		return fmt.Errorf("corpus %s has no text: %s, all empty (0 bytes); add text to them", c.Desc, plural(len(c.Files), "file"))
	}
	return nil
}

// listPath lists the files of one argument of NewCorpus.
func listPath(p string) ([]File, error) {
	info, err := os.Stat(p)
	switch {
	case err == nil && info.IsDir():
		files, err := walk(p, func(string) bool { return true })
		if err == nil && len(files) == 0 {
			err = fmt.Errorf("corpus directory %q has no files: add text files to it or pass another path", p)
		}
		return files, err
	case err == nil && info.Mode().IsRegular():
		return []File{{Path: p, Name: filepath.Base(p), Size: info.Size(), ModTime: info.ModTime()}}, nil
	case err == nil:
		return nil, fmt.Errorf("corpus path %q is %s, not a file or directory", p, regular.Kind(info.Mode()))
	case errors.Is(err, fs.ErrNotExist) && strings.ContainsAny(p, `*?[`):
		return glob(p)
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("corpus path %q does not exist: pass an existing file, directory or glob pattern", p)
	}
	return nil, pathError("corpus path", p, err)
}

// glob lists the files matched by pattern; names are relative to the
// pattern's leading directories without metacharacters.
func glob(pattern string) ([]File, error) {
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return nil, fmt.Errorf("corpus pattern %q: %w", pattern, err)
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("corpus pattern %q matches no files: check the pattern", pattern)
	}
	base := pattern
	for strings.ContainsAny(base, `*?[`) {
		base = filepath.Dir(base)
	}
	var files []File
	for _, m := range matches {
		info, err := os.Stat(m)
		if err != nil {
			return nil, pathError("corpus file", m, err)
		}
		if info.IsDir() {
			sub, err := walk(m, func(string) bool { return true })
			if err != nil {
				return nil, err
			}
			for _, f := range sub {
				f.Name = relName(base, f.Path)
				files = append(files, f)
			}
		} else if info.Mode().IsRegular() {
			files = append(files, File{Path: m, Name: relName(base, m), Size: info.Size(), ModTime: info.ModTime()})
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("corpus pattern %q matches no files, only empty directories: check the pattern", pattern)
	}
	slices.SortFunc(files, func(a, b File) int { return cmp.Compare(a.Name, b.Name) })
	return files, nil
}

// walk lists the regular files under root whose base names keep accepts,
// sorted by name, skipping hidden files and directories.
func walk(root string, keep func(name string) bool) ([]File, error) {
	var files []File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return pathError("corpus directory", path, err)
		}
		if path != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !keep(d.Name()) {
			return nil
		}
		info, err := os.Stat(path) // follows links
		if err != nil {
			return pathError("corpus file", path, err)
		}
		if !info.Mode().IsRegular() {
			return nil // a link to a directory, a pipe, a socket...
		}
		files = append(files, File{Path: path, Name: relName(root, path), Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(files, func(a, b File) int { return cmp.Compare(a.Name, b.Name) })
	return files, nil
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func relName(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		rel = filepath.Base(path)
	}
	return filepath.ToSlash(rel)
}

// pathError describes a failure to use path, without repeating the path
// that err already names, and says what to do about common causes.
func pathError(what, path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	hint := ""
	switch {
	case errors.Is(err, fs.ErrPermission):
		hint = ": check its permissions"
	case errors.Is(err, fs.ErrNotExist):
		hint = ": it may have been removed or be a broken link"
	}
	return fmt.Errorf("%s %q: %w%s", what, path, err, hint)
}

// GoSource returns the default corpus, present on every machine with Go:
// the *.go files of the Go toolchain's source tree, GOROOT/src.
func GoSource() (*Corpus, error) {
	root, err := goRoot(runtime.GOROOT, goEnvGOROOT)
	if err != nil {
		return nil, err
	}
	src := filepath.Join(root, "src")
	files, err := walk(src, func(name string) bool { return strings.HasSuffix(name, ".go") })
	if err != nil {
		return nil, err
	}
	c := &Corpus{Desc: "Go source " + src, Files: files, origin: "Go source " + strconv.Quote(src), listed: pathsDigest(files)}
	if err := c.checkNotEmpty(); err != nil {
		return nil, err
	}
	return c, nil
}

// goRoot finds the Go toolchain: the root the program was built with, if
// it is still there, else what the go command says.
func goRoot(builtIn func() string, goEnv func() (string, error)) (string, error) {
	var tried []string
	if r := builtIn(); r != "" {
		if isDir(filepath.Join(r, "src")) {
			return r, nil
		}
		tried = append(tried, fmt.Sprintf("runtime.GOROOT() is %q, which has no src directory", r))
	} else {
		tried = append(tried, "runtime.GOROOT() is empty")
	}
	r, err := goEnv()
	switch {
	case err != nil:
		tried = append(tried, fmt.Sprintf("`go env GOROOT` failed (%v)", err))
	case r == "":
		tried = append(tried, "`go env GOROOT` printed nothing")
	case !isDir(filepath.Join(r, "src")):
		tried = append(tried, fmt.Sprintf("`go env GOROOT` is %q, which has no src directory", r))
	default:
		return r, nil
	}
	return "", fmt.Errorf("cannot find the Go source tree for the default corpus: %s; install Go, set GOROOT, or pass a corpus path", strings.Join(tried, " and "))
}

func goEnvGOROOT() (string, error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	return strings.TrimSpace(string(out)), err
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}

// Split divides the files into training and validation files by a hash
// (64-bit FNV-1a) of their names, so a file lands on the same side on
// every machine and whatever other files are in the corpus; about
// valFraction of the files go to validation.
func (c *Corpus) Split(valFraction float64) (train, val *Corpus) {
	train = &Corpus{Desc: c.Desc + " (training split)", TextField: c.TextField, MaxRecord: c.MaxRecord}
	val = &Corpus{Desc: c.Desc + " (validation split)", TextField: c.TextField, MaxRecord: c.MaxRecord}
	for _, f := range c.Files {
		if isValidation(f.Name, valFraction) {
			val.Files = append(val.Files, f)
		} else {
			train.Files = append(train.Files, f)
		}
	}
	return train, val
}

func isValidation(name string, fraction float64) bool {
	h := fnv.New64a()
	h.Write([]byte(name))
	// FNV's low bits mix poorly; its top 53 bits make a uniform float.
	u := float64(h.Sum64()>>11) / (1 << 53)
	return u < fraction
}
