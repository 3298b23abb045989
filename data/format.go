package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"

	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/internal/regular"
)

// A Format is how a corpus file holds its text, told by the file's name:
// a name ending in .jsonl or .ndjson is JSON lines, one in .parquet is
// Parquet, and any other is plain text; a further .gz means gzip-compressed
// (for text and JSON lines: Parquet compresses its own pages).
type Format uint8

const (
	// Text is a plain text file: one document.
	Text Format = iota
	// TextGzip is a gzip-compressed text file: one document.
	TextGzip
	// JSONLines holds a JSON object per line, each a document: the string
	// of its text field (Corpus.TextField).
	JSONLines
	// JSONLinesGzip is gzip-compressed JSON lines.
	JSONLinesGzip
	// Parquet is a Parquet file whose text column (Corpus.TextField)
	// holds a document in each row.
	Parquet
)

// DefaultTextField is the field of JSON lines, and the column of Parquet
// files, that holds the text unless Corpus.TextField says otherwise: that
// of most datasets on the Hugging Face hub.
const DefaultTextField = "text"

func (f Format) String() string {
	switch f {
	case Text:
		return "text"
	case TextGzip:
		return "gzip text"
	case JSONLines:
		return "JSON lines"
	case JSONLinesGzip:
		return "gzip JSON lines"
	case Parquet:
		return "Parquet"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// records reports whether files of the format hold records with a text
// field, rather than text.
func (f Format) records() bool { return f == JSONLines || f == JSONLinesGzip || f == Parquet }

// formatOf returns the format of a file named name.
func formatOf(name string) (Format, error) {
	lower := strings.ToLower(name)
	base, gz := strings.CutSuffix(lower, ".gz")
	switch {
	case strings.HasSuffix(base, ".jsonl") || strings.HasSuffix(base, ".ndjson"):
		if gz {
			return JSONLinesGzip, nil
		}
		return JSONLines, nil
	case strings.HasSuffix(base, ".parquet") && gz:
		return 0, fmt.Errorf("corpus file %q is gzip-compressed Parquet, which polysketch does not read: decompress it (Parquet compresses its own pages)", name)
	case strings.HasSuffix(base, ".parquet"):
		return Parquet, nil
	case gz:
		return TextGzip, nil
	}
	return Text, nil
}

// sniffSize is how much of a text file isBinary looks at: as much as git
// does.
const sniffSize = 8000

// isBinary reports whether the text file f looks like binary data, as git
// tells: a NUL byte in its first few kilobytes (decompressed, for gzip),
// or, for data without one, more than a quarter of those bytes not valid
// UTF-8. Text in Latin-1 or with a few stray bytes stays text.
func isBinary(f File) (bool, error) {
	file, err := regular.Open(f.Path)
	if err != nil {
		return false, pathError("cannot read corpus file", f.Path, err)
	}
	defer file.Close()
	var r io.Reader = file
	if f.Format == TextGzip {
		gz, err := gzip.NewReader(file)
		if err != nil {
			return false, fmt.Errorf("corpus file %q is not gzip data (%v): decompress it or fix its name", f.Path, err)
		}
		defer gz.Close()
		r = gz
	}
	buf := make([]byte, sniffSize)
	n, err := io.ReadFull(r, buf)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return false, fmt.Errorf("cannot read corpus file %q: %v", f.Path, err)
	}
	return looksBinary(buf[:n], n < sniffSize), nil
}

// looksBinary applies isBinary's test to the start of a file; whole says
// b is all of it, so that a character cut at its end is invalid too.
func looksBinary(b []byte, whole bool) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	invalid := 0
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			if !whole && !utf8.FullRune(b[i:]) {
				break // cut by the end of what was read
			}
			invalid++
		}
		i += n
	}
	return 4*invalid > len(b)
}

// A docReader reads an open corpus file one document at a time.
type docReader interface {
	// next returns the text of the next document, which is not empty and
	// stays readable until the next call, or io.EOF after the last one,
	// once the whole file has been read as it was listed.
	next() (io.Reader, error)
	// close closes the file.
	close()
}

// records says how files of records (JSON lines, Parquet) hold their text.
type records struct {
	field string // the field, or column, of the text
	max   int64  // bytes of a record at most: a JSON-lines line, a Parquet value
}

// openDocs returns a docReader of the file f, open as file, whose records
// are read as rec says.
func openDocs(file *os.File, f File, rec records) (docReader, error) {
	counted := &countingReader{r: file}
	switch f.Format {
	case Text:
		return &textDocs{file: file, f: f, r: counted, counted: counted}, nil
	case TextGzip:
		gz, err := gzip.NewReader(counted)
		if err != nil {
			return nil, fmt.Errorf("corpus file %q is not gzip data (%v): decompress it or fix its name", f.Path, err)
		}
		// Buffered to tell an empty text, which is no document.
		return &textDocs{file: file, f: f, r: bufio.NewReaderSize(gz, 1<<16), counted: counted}, nil
	case JSONLines:
		return &jsonDocs{file: file, f: f, field: rec.field, max: rec.max, r: bufio.NewReaderSize(counted, 1<<16), counted: counted}, nil
	case JSONLinesGzip:
		gz, err := gzip.NewReader(counted)
		if err != nil {
			return nil, fmt.Errorf("corpus file %q is not gzip data (%v): decompress it or fix its name", f.Path, err)
		}
		return &jsonDocs{file: file, f: f, field: rec.field, max: rec.max, r: bufio.NewReaderSize(gz, 1<<16), counted: counted}, nil
	case Parquet:
		d, err := openParquet(file, f, rec)
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	return nil, fmt.Errorf("corpus file %q: unknown format %v", f.Path, f.Format)
}

// countingReader counts the bytes read from a file, to check that it is
// read whole as it was listed.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// checkRead reports a file that did not have its listed size when read to
// its end.
func checkRead(f File, counted *countingReader) error {
	// Read on past what a decompressor left, if anything.
	if _, err := io.Copy(io.Discard, counted); err != nil {
		return pathError("cannot read corpus file", f.Path, err)
	}
	if counted.n != f.Size {
		return fmt.Errorf("corpus file %q changed while being read (%d bytes, was %d): run again", f.Path, counted.n, f.Size)
	}
	return nil
}

// textDocs reads a text file, plain or gzip-compressed: one document.
type textDocs struct {
	file    *os.File
	f       File
	r       io.Reader
	counted *countingReader
	started bool
}

func (d *textDocs) next() (io.Reader, error) {
	if !d.started {
		d.started = true
		empty := false
		if b, ok := d.r.(*bufio.Reader); ok {
			_, err := b.Peek(1)
			empty = err == io.EOF
		}
		if !empty {
			return readErrors{d.r, d.f}, nil
		}
	}
	if err := checkRead(d.f, d.counted); err != nil {
		return nil, err
	}
	return nil, io.EOF
}

func (d *textDocs) close() { d.file.Close() }

// readErrors names the file in errors other than io.EOF.
type readErrors struct {
	r io.Reader
	f File
}

func (r readErrors) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = pathError("cannot read corpus file", r.f.Path, err)
	}
	return n, err
}

// jsonDocs reads JSON lines, plain or gzip-compressed: a document per
// line, the string of its field. Blank lines and lines whose field is null
// hold no document; any other line without a string there is an error
// naming the file and line.
type jsonDocs struct {
	file    *os.File
	f       File
	field   string
	max     int64 // bytes of a line at most
	r       *bufio.Reader
	counted *countingReader
	line    int
	buf     []byte
	text    strings.Reader
	record  map[string]json.RawMessage
}

func (d *jsonDocs) next() (io.Reader, error) {
	for {
		line, err := d.readLine()
		if err == io.EOF && len(line) == 0 {
			if err := checkRead(d.f, d.counted); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
		if _, ok := errors.AsType[*RecordTooLongError](err); ok {
			return nil, err
		}
		if err != nil && err != io.EOF {
			return nil, d.errorf("cannot read: %v", err)
		}
		text, err := d.parse(line)
		if err != nil {
			return nil, err
		}
		if len(text) > 0 {
			d.text.Reset(text)
			return &d.text, nil
		}
	}
}

// readLine returns the next line, of up to d.max bytes, and io.EOF with
// the last one if it has no newline.
func (d *jsonDocs) readLine() ([]byte, error) {
	d.line++
	d.buf = d.buf[:0]
	for {
		part, err := d.r.ReadSlice('\n')
		if int64(len(d.buf)+len(part)) > d.max {
			return nil, &RecordTooLongError{Path: d.f.Path, Line: d.line, Limit: d.max}
		}
		d.buf = append(d.buf, part...)
		if err != bufio.ErrBufferFull {
			return d.buf, err
		}
	}
}

// A RecordTooLongError is a record longer than the record limit of its
// corpus (Corpus.MaxRecord): a line of JSON lines, or a value of a
// Parquet file's text column.
type RecordTooLongError struct {
	Path  string
	Line  int    // of JSON lines, from 1; 0 for Parquet
	Row   int64  // of Parquet, from 0
	Field string // the column of Parquet
	Limit int64  // bytes
}

func (e *RecordTooLongError) Error() string { return e.Unwrap().Error() }

// Unwrap returns the error as internal/field writes it, naming the limit
// (max_record) for a command line to name it as its flag.
func (e *RecordTooLongError) Unwrap() error {
	if e.Line == 0 {
		return field.Errorf("%s: row %d (from 0), column %q: a text of more than %s, the record limit: split it into smaller records, or raise %s",
			e.Path, e.Row, e.Field, bytesString(e.Limit), field.Name("max_record"))
	}
	return field.Errorf("%s:%d: a record of more than %s, the record limit: split it into smaller records, or raise %s",
		e.Path, e.Line, bytesString(e.Limit), field.Name("max_record"))
}

// bytesString writes a size in bytes for people: 64 MiB, 1000 bytes.
func bytesString(n int64) string {
	for _, u := range []struct {
		name  string
		scale int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.scale && n%u.scale == 0 {
			return fmt.Sprintf("%d %s", n/u.scale, u.name)
		}
	}
	return plural(int(n), "byte")
}

// parse returns the text of a line.
func (d *jsonDocs) parse(line []byte) (string, error) {
	if d.line == 1 {
		line = bytes.TrimPrefix(line, []byte("\ufeff")) // a byte-order mark some editors write
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return "", nil
	}
	if line[0] != '{' {
		return "", d.errorf("%s, not a JSON object with a %q field", jsonKind(line), d.field)
	}
	clear(d.record)
	if d.record == nil {
		d.record = make(map[string]json.RawMessage)
	}
	if err := json.Unmarshal(line, &d.record); err != nil {
		return "", d.errorf("invalid JSON: %v", err)
	}
	raw, ok := d.record[d.field]
	if !ok {
		fields := slices.Sorted(func(yield func(string) bool) {
			for k := range d.record {
				if !yield(k) {
					return
				}
			}
		})
		return "", field.Errorf("%s:%d: no %q field (fields: %s): set %s to the field that holds the text", d.f.Path, d.line, d.field, quoteList(fields, 8), field.Name("text_field"))
	}
	var s *string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", d.errorf("field %q is %s, not a string", d.field, jsonKind(raw))
	}
	if s == nil {
		return "", nil // null: no text
	}
	return *s, nil
}

// errorf returns an error at the current line, as compilers write them.
func (d *jsonDocs) errorf(format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", d.f.Path, d.line, fmt.Sprintf(format, args...))
}

func (d *jsonDocs) close() { d.file.Close() }

// jsonKind names the kind of JSON value that b starts with.
func jsonKind(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "empty"
	}
	switch c := b[0]; {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	}
	return "not JSON"
}

// quoteList quotes up to max names, saying how many more there are.
func quoteList(names []string, max int) string {
	if len(names) == 0 {
		return "none"
	}
	var q []string
	for _, n := range names[:min(len(names), max)] {
		q = append(q, fmt.Sprintf("%q", n))
	}
	s := strings.Join(q, ", ")
	if len(names) > max {
		s += fmt.Sprintf(" and %d more", len(names)-max)
	}
	return s
}

// parquetDocs reads the text column of a Parquet file: a document per row,
// a page at a time. Null values hold no document.
type parquetDocs struct {
	file   *os.File
	f      File
	rec    records
	col    int
	groups []parquet.RowGroup
	group  int // the next row group
	pages  parquet.Pages
	page   parquet.Page
	values parquet.ValueReader
	buf    []parquet.Value
	i, n   int   // buf[i:n] are values not yet returned
	row    int64 // of the next value
	text   bytes.Reader
}

// openParquet opens the Parquet file f, open as file, at its column column
// (a dotted path for a nested one).
func openParquet(file *os.File, f File, rec records) (*parquetDocs, error) {
	column := rec.field
	pf, err := parquet.OpenFile(file, f.Size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("corpus file %q is not a Parquet file polysketch can read: %v", f.Path, err)
	}
	schema := pf.Schema()
	leaf, ok := schema.Lookup(strings.Split(column, ".")...)
	if !ok {
		var cols []string
		for _, c := range schema.Columns() {
			cols = append(cols, strings.Join(c, "."))
		}
		return nil, field.Errorf("corpus file %q has no column %q (columns: %s): set %s to the column that holds the text", f.Path, column, quoteList(cols, 12), field.Name("text_field"))
	}
	switch t := leaf.Node.Type(); {
	case t.Kind() != parquet.ByteArray:
		return nil, field.Errorf("corpus file %q: column %q holds %v, not strings: set %s to the column that holds the text", f.Path, column, t.Kind(), field.Name("text_field"))
	case leaf.MaxRepetitionLevel > 0:
		return nil, field.Errorf("corpus file %q: column %q is a list, not one string a row: set %s to the column that holds the text", f.Path, column, field.Name("text_field"))
	}
	return &parquetDocs{file: file, f: f, rec: rec, col: leaf.ColumnIndex, groups: pf.RowGroups(), buf: make([]parquet.Value, 256)}, nil
}

func (d *parquetDocs) next() (io.Reader, error) {
	for {
		for d.i < d.n {
			v := d.buf[d.i]
			d.i++
			d.row++ // a value a row: the column is no list
			if n := len(v.ByteArray()); int64(n) > d.rec.max {
				// The page that holds it is read (pages are a few MiB at
				// most as writers write them; 2 GiB as the format
				// allows); its text goes no further.
				return nil, &RecordTooLongError{Path: d.f.Path, Row: d.row - 1, Field: d.rec.field, Limit: d.rec.max}
			}
			if !v.IsNull() && len(v.ByteArray()) > 0 {
				d.text.Reset(v.ByteArray())
				return &d.text, nil
			}
		}
		switch {
		case d.values != nil:
			n, err := d.values.ReadValues(d.buf)
			d.i, d.n = 0, n
			if err == io.EOF {
				d.values = nil
			} else if err != nil {
				return nil, d.errorf(err)
			}
		case d.pages != nil:
			d.releasePage()
			page, err := d.pages.ReadPage()
			if err == io.EOF {
				d.pages.Close()
				d.pages = nil
				continue
			}
			if err != nil {
				return nil, d.errorf(err)
			}
			d.page, d.values = page, page.Values()
		case d.group < len(d.groups):
			d.pages = d.groups[d.group].ColumnChunks()[d.col].Pages()
			d.group++
		default:
			if err := checkUnchanged(d.file, d.f); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
	}
}

func (d *parquetDocs) releasePage() {
	if d.page != nil {
		parquet.Release(d.page)
		d.page = nil
	}
}

func (d *parquetDocs) errorf(err error) error {
	return fmt.Errorf("corpus file %q: reading Parquet row group %d: %v", d.f.Path, d.group, err)
}

func (d *parquetDocs) close() {
	d.releasePage()
	if d.pages != nil {
		d.pages.Close()
	}
	d.file.Close()
}

// checkUnchanged reports a file whose size or modification time differ
// from those listed.
func checkUnchanged(file *os.File, f File) error {
	info, err := file.Stat()
	switch {
	case err != nil:
		return pathError("cannot read corpus file", f.Path, err)
	case info.Size() != f.Size || !info.ModTime().Equal(f.ModTime):
		return fmt.Errorf("corpus file %q changed while being read: run again", f.Path)
	}
	return nil
}
