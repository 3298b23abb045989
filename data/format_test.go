package data

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/polysketch/polysketch/data/tokenizer"
)

func TestFormatOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Format
		ok   bool
	}{
		{"a.txt", Text, true},
		{"main.go", Text, true},
		{"README", Text, true},
		{"a.txt.gz", TextGzip, true},
		{"a.GZ", TextGzip, true},
		{"d.jsonl", JSONLines, true},
		{"d.NDJSON", JSONLines, true},
		{"d.jsonl.gz", JSONLinesGzip, true},
		{"d.ndjson.gz", JSONLinesGzip, true},
		{"d.json", Text, true}, // one JSON document, not lines of records
		{"train-00000-of-00001.parquet", Parquet, true},
		{"d.parquet.gz", 0, false},
	} {
		got, err := formatOf(tc.name)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("formatOf(%q) = %v, %v; want %v, ok %v", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

// recordDocs are documents for the format tests: Unicode, white space, a
// document longer than the small chunks the tests cut at, one without a
// space to cut at, and empty ones, which are no documents.
var recordDocs = []string{
	"package main\n\nfunc main() {\n\tprintln(\"héllo, 世界\")\n}\n",
	"",
	"  leading and trailing spaces  ",
	strings.Repeat("the quick brown fox jumps over the lazy dog; ", 40),
	strings.Repeat("x", 300),
	"emoji 🙂 and a tab\tand CRLF\r\n",
	"",
	"last",
}

// writeGzip writes text gzip-compressed to path.
func writeGzip(t testing.TB, path string, text []byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	if _, err := zw.Write(text); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// jsonLines returns docs as JSON lines with the text in field, beside
// other fields, with a blank line and a null text among them.
func jsonLines(t testing.TB, field string, docs []string) []byte {
	t.Helper()
	var b strings.Builder
	for i, d := range docs {
		line, err := json.Marshal(map[string]any{"id": i, field: d, "meta": map[string]any{"n": []int{i}}})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteString("\n")
		if i == 2 {
			fmt.Fprintf(&b, "\n{\"id\": 99, %q: null}\n", field)
		}
	}
	return []byte(b.String())
}

type parquetRow struct {
	ID   int64  `parquet:"id"`
	Text string `parquet:"text"`
	Lang string `parquet:"lang"`
}

type parquetOptionalRow struct {
	Text *string `parquet:"text,optional,dict"`
	Year int32   `parquet:"year"`
}

// writeParquet writes rows to a Parquet file at path in small row groups
// and pages, so that reading it crosses both.
func writeParquet[T any](t testing.TB, path string, rows []T) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[T](f, parquet.MaxRowsPerRowGroup(3), parquet.PageBufferSize(64))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// looseFiles writes each document to a file of its own under dir, named
// in order, and returns the corpus of them.
func looseFiles(t testing.TB, dir string, docs []string) *Corpus {
	t.Helper()
	files := map[string]string{}
	for i, d := range docs {
		files[fmt.Sprintf("doc%02d.txt", i)] = d
	}
	writeFiles(t, dir, files)
	c, err := NewCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRecordFormats checks that JSON lines, Parquet and gzip files give
// the tokens of the same documents in loose text files, whatever the
// chunk size and the number of workers.
func TestRecordFormats(t *testing.T) {
	dir := t.TempDir()
	loose := looseFiles(t, filepath.Join(dir, "loose"), recordDocs)
	at := func(name string) string { return filepath.Join(dir, name) }

	// With Windows line ends and a byte-order mark.
	crlf := strings.ReplaceAll(string(jsonLines(t, "text", recordDocs)), "\n", "\r\n")
	if err := os.WriteFile(at("docs.jsonl"), []byte("\ufeff"+crlf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(at("content.ndjson"), jsonLines(t, "content", recordDocs), 0o644); err != nil {
		t.Fatal(err)
	}
	writeGzip(t, at("docs.jsonl.gz"), jsonLines(t, "text", recordDocs))
	var rows []parquetRow
	var optRows []parquetOptionalRow
	for i, d := range recordDocs {
		rows = append(rows, parquetRow{ID: int64(i), Text: d, Lang: "en"})
		optRows = append(optRows, parquetOptionalRow{Text: &recordDocs[i], Year: 2000})
		if i == 1 {
			optRows = append(optRows, parquetOptionalRow{Year: 1999}) // null text
		}
	}
	writeParquet(t, at("docs.parquet"), rows)
	writeParquet(t, at("optional.parquet"), optRows)
	if err := os.MkdirAll(at("gz"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, d := range recordDocs {
		writeGzip(t, at(fmt.Sprintf("gz/doc%02d.txt.gz", i)), []byte(d))
	}
	// A directory of every format, in name order.
	mixed := at("mixed")
	if err := os.MkdirAll(mixed, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, mixed, map[string]string{"a.txt": recordDocs[0], "d.txt": recordDocs[5]})
	if err := os.WriteFile(filepath.Join(mixed, "b.jsonl"), jsonLines(t, "text", recordDocs[1:3]), 0o644); err != nil {
		t.Fatal(err)
	}
	writeParquet(t, filepath.Join(mixed, "c.parquet"), rows[3:5])
	writeGzip(t, filepath.Join(mixed, "e.txt.gz"), []byte(recordDocs[6]+recordDocs[7]))

	for _, tc := range []struct {
		name, field string
		paths       []string
	}{
		{"JSON lines", "", []string{at("docs.jsonl")}},
		{"JSON lines, another field", "content", []string{at("content.ndjson")}},
		{"gzip JSON lines", "", []string{at("docs.jsonl.gz")}},
		{"Parquet", "text", []string{at("docs.parquet")}},
		{"Parquet, optional dictionary column", "", []string{at("optional.parquet")}},
		{"gzip text", "", []string{at("gz")}},
		{"glob of gzip text", "", []string{at("gz/*.gz")}},
		{"directory of every format", "", []string{mixed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCorpus(tc.paths...)
			if err != nil {
				t.Fatal(err)
			}
			c.TextField = tc.field
			for _, tok := range []tokenizer.Tokenizer{sepTokenizer{}, gpt2(t)} {
				for _, size := range []int{64, 1 << 20} {
					want, _ := encodeTo(t, filepath.Join(t.TempDir(), "want"), loose, tok, size, 2)
					got, _ := encodeTo(t, filepath.Join(t.TempDir(), "got"), c, tok, size, 2)
					if g, w := readAll(t, got), readAll(t, want); !slices.Equal(g, w) {
						t.Errorf("%s, chunks of %d: %d tokens %q, want the %d of the loose files %q",
							tok.Name(), size, len(g), decode(t, tok, g), len(w), decode(t, tok, w))
					}
					got.Close()
					want.Close()
				}
			}
		})
	}
}

// TestLoadTextField checks that the token cache tells fields apart: a
// corpus read for another field is tokenized again, not served the first
// field's tokens.
func TestLoadTextField(t *testing.T) {
	dir, cache := t.TempDir(), t.TempDir()
	var lines strings.Builder
	for i := range 20 {
		fmt.Fprintf(&lines, "{\"text\": \"text %d \", \"title\": \"TITLE %d \"}\n", i, i)
	}
	path := filepath.Join(dir, "docs.jsonl")
	if err := os.WriteFile(path, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"", "title", "text"} {
		c, err := NewCorpus(path)
		if err != nil {
			t.Fatal(err)
		}
		c.TextField = field
		train, val, err := Load(context.Background(), c, tokenizer.Byte, Options{CacheDir: cache})
		if err != nil {
			t.Fatal(err)
		}
		text := decode(t, tokenizer.Byte, readAll(t, train)) + decode(t, tokenizer.Byte, readAll(t, val))
		train.Close()
		val.Close()
		want := "text 0 text 1 "
		if field == "title" {
			want = "TITLE 0 TITLE 1 "
		}
		if !strings.HasPrefix(text, want) {
			t.Errorf("field %q: tokens start %q, want %q", field, text[:min(len(text), 20)], want)
		}
	}
}

// encodeErr tokenizes c with the byte tokenizer and returns the error.
func encodeErr(t *testing.T, c *Corpus) error {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "tokens"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := newTokenWriter(f, tokenizer.Byte)
	if err != nil {
		t.Fatal(err)
	}
	_, err = encodeFiles(context.Background(), c.Files, c.records(), tokenizer.Byte, w, 1<<20, 2)
	return err
}

func TestRecordErrors(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	good := `{"text": "fine"}` + "\n"
	writeFiles(t, dir, map[string]string{
		"syntax.jsonl":  good + good + `{"text": "unterminated}` + "\n" + good,
		"missing.jsonl": good + `{"body": "x", "id": 2}` + "\n",
		"number.jsonl":  good + good + good + `{"text": 42}` + "\n",
		"array.jsonl":   `["text"]` + "\n",
		"nolf.jsonl":    good + `{"text": 1}`,
		"notgz.txt.gz":  "plain text",
	})
	writeGzip(t, at("gz.jsonl.gz"), []byte(good+"{\n"))
	writeParquet(t, at("cols.parquet"), []parquetRow{{ID: 1, Text: "a", Lang: "en"}})
	// Truncated gzip files: cut before their checksums.
	for name, text := range map[string]string{"cut.jsonl.gz": strings.Repeat(good, 100), "cut.txt.gz": strings.Repeat("text ", 100)} {
		writeGzip(t, at(name), []byte(text))
		if err := os.Truncate(at(name), 30); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(at("notparquet.parquet"), []byte("PAR1 but not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, field string
		want        string
	}{
		{"syntax.jsonl", "", at("syntax.jsonl") + ":3: invalid JSON: "},
		{"missing.jsonl", "", at("missing.jsonl") + `:2: no "text" field (fields: "body", "id"): set text_field to the field that holds the text`},
		{"number.jsonl", "", at("number.jsonl") + `:4: field "text" is a number, not a string`},
		{"array.jsonl", "", at("array.jsonl") + `:1: an array, not a JSON object with a "text" field`},
		{"nolf.jsonl", "", at("nolf.jsonl") + `:2: field "text" is a number`},
		{"gz.jsonl.gz", "", at("gz.jsonl.gz") + ":2: invalid JSON: "},
		{"notgz.txt.gz", "", "is not gzip data"},
		{"cols.parquet", "", fmt.Sprintf(`corpus file %q has no column "text"`, at("cols.parquet"))},
		{"cols.parquet", "body", fmt.Sprintf(`corpus file %q has no column "body" (columns: "id", "text", "lang"): set text_field to the column that holds the text`, at("cols.parquet"))},
		{"cols.parquet", "id", `column "id" holds INT64, not strings`},
		{"cut.jsonl.gz", "", ": cannot read: unexpected EOF"}, // at the line the cut falls in
		{"cut.txt.gz", "", fmt.Sprintf("cannot read corpus file %q: unexpected EOF", at("cut.txt.gz"))},
		{"notparquet.parquet", "", fmt.Sprintf("corpus file %q is not a Parquet file polysketch can read", at("notparquet.parquet"))},
	} {
		c, err := NewCorpus(at(tc.path))
		if err == nil {
			c.TextField = tc.field
			err = encodeErr(t, c)
		}
		if tc.path == "cols.parquet" && tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.path, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s, field %q: error %v, want one line with %q", tc.path, tc.field, err, tc.want)
		}
	}
}

func TestBinaryFiles(t *testing.T) {
	dir := t.TempDir()
	png := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10"
	noNUL := make([]byte, 4000)
	for i := range noNUL {
		noNUL[i] = byte(0x80 + i*37%0x7f) // bytes that are never valid UTF-8 alone
	}
	writeFiles(t, dir, map[string]string{
		"a.txt":       "some text\n",
		"b.png":       png,
		"c.bin":       string(noNUL),
		"d.latin1":    "caf\xe9 cr\xe8me br\xfbl\xe9e, na\xefve fa\xe7ade; " + strings.Repeat("plain words ", 10),
		"e/f.jpg":     "\xff\xd8\xff\xe0\x00\x10JFIF\x00",
		"e/g.md":      "# title\n",
		"h.utf8":      strings.Repeat("日本語のテキスト。", 100),
		"i.txt":       "cut at the end of the sniffed part: " + strings.Repeat("é", sniffSize),
		"z/only.webp": "RIFF\x00\x00\x00\x00WEBP",
	})
	writeGzip(t, filepath.Join(dir, "gz.txt.gz"), []byte("gzip\x00binary"))
	c, err := NewCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantText := []string{"a.txt", "d.latin1", "e/g.md", "h.utf8", "i.txt"}
	wantBinary := []string{"b.png", "c.bin", "e/f.jpg", "gz.txt.gz", "z/only.webp"}
	if got := names(c); !slices.Equal(got, wantText) {
		t.Errorf("text files %q, want %q", got, wantText)
	}
	if !slices.Equal(c.Binary, wantBinary) {
		t.Errorf("binary files %q, want %q", c.Binary, wantBinary)
	}
	if got, want := c.BinaryNote(), "skipped 5 files of binary data (b.png, c.bin, e/f.jpg, ...)"; got != want {
		t.Errorf("BinaryNote() = %q, want %q", got, want)
	}
	one, err := NewCorpus(filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.png"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := one.BinaryNote(), "skipped 1 file of binary data (b.png)"; got != want {
		t.Errorf("BinaryNote() = %q, want %q", got, want)
	}
	_, err = NewCorpus(filepath.Join(dir, "z"))
	if want := "has no text files: skipped 1 file of binary data (only.webp)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("binary-only corpus: error %v, want %q", err, want)
	}
}

// TestTexts checks that Corpus.Texts gives the documents of every format
// whole and in order, each started once, a document larger than a piece
// in several pieces.
func TestTexts(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for _, d := range recordDocs {
		if d != "" {
			want = append(want, d)
		}
	}
	looseFiles(t, filepath.Join(dir, "loose"), recordDocs)
	jsonl := filepath.Join(dir, "docs.jsonl.gz")
	writeGzip(t, jsonl, jsonLines(t, "body", recordDocs))
	big := strings.Repeat("a long document, longer than the pieces Texts gives; ", 50000)
	writeFiles(t, filepath.Join(dir, "big"), map[string]string{"big.txt": big})
	for _, tc := range []struct {
		name   string
		paths  []string
		want   []string
		pieces int // at least
	}{
		{"loose files", []string{filepath.Join(dir, "loose")}, want, len(want)},
		{"gzip JSON lines and a big file", []string{jsonl, filepath.Join(dir, "big")}, append(slices.Clone(want), big), len(want) + 3},
	} {
		c, err := NewCorpus(tc.paths...)
		if err != nil {
			t.Fatal(err)
		}
		c.TextField = "body"
		var got []string
		pieces := 0
		err = c.Texts(func(text []byte, start bool) error {
			pieces++
			if start || len(got) == 0 {
				got = append(got, "")
			}
			got[len(got)-1] += string(text)
			return nil
		})
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %d documents, %v; want the %d written", tc.name, len(got), err, len(tc.want))
		}
		if pieces < tc.pieces {
			t.Errorf("%s: %d pieces, want at least %d", tc.name, pieces, tc.pieces)
		}
	}
}

// TestRecordLimit reads JSON lines, plain and gzip-compressed, and
// Parquet files with a record longer than a small limit: Load must refuse
// it in one line naming the file and line, or row and column, and take
// records up to the limit.
func TestRecordLimit(t *testing.T) {
	dir := t.TempDir()
	const limit = 4 << 10
	long := `{"text": "` + strings.Repeat("x", 2*limit) + `"}` + "\n"
	fits := `{"text": "` + strings.Repeat("y", limit-13) + `"}` + "\n" // 13 bytes of JSON around the text, the newline included
	if len(fits) != limit {
		t.Fatalf("a record of %d bytes, want %d", len(fits), limit)
	}
	good := `{"text": "fine"}` + "\n"
	writeFiles(t, dir, map[string]string{"long.jsonl": good + long + good, "fits.jsonl": good + fits})
	writeGzip(t, filepath.Join(dir, "long.jsonl.gz"), []byte(good+good+long))
	row := func(text string) parquetRow { return parquetRow{Text: text, Lang: "en"} }
	writeParquet(t, filepath.Join(dir, "long.parquet"), []parquetRow{row("fine"), row("fine"), row("fine"), row("fine"), row(strings.Repeat("x", limit+1)), row("fine")})
	writeParquet(t, filepath.Join(dir, "fits.parquet"), []parquetRow{row("fine"), row(strings.Repeat("y", limit))})
	for _, tc := range []struct {
		name string
		line int
		want string // for Parquet
	}{
		{"long.jsonl", 2, ""}, {"long.jsonl.gz", 3, ""}, {"fits.jsonl", 0, ""},
		{"long.parquet", -1, `long.parquet: row 4 (from 0), column "text": a text of more than 4 KiB, the record limit`},
		{"fits.parquet", 0, ""},
	} {
		path := filepath.Join(dir, tc.name)
		c, err := NewCorpus(path)
		if err != nil {
			t.Fatal(err)
		}
		c.MaxRecord = limit
		train, val, err := Load(context.Background(), c, tokenizer.Byte, Options{CacheDir: t.TempDir()})
		if tc.line == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			} else {
				train.Close()
				val.Close()
			}
			continue
		}
		want := fmt.Sprintf("%s:%d: a record of more than 4 KiB, the record limit", path, tc.line)
		if tc.want != "" {
			want = filepath.Join(dir, tc.want)
		}
		var rl *RecordTooLongError
		if !errors.As(err, &rl) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", tc.name, err, want)
		}
	}
}
