package multichoice

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"

	"github.com/polysketch/polysketch/internal/regular"
)

// A Format is how a file lays out its questions: the field names of one
// of the datasets lm-evaluation-harness evaluates, or a generic one.
type Format string

// The formats ReadFile knows. Auto tells it to recognize the format by
// the fields of the file's first record.
const (
	Auto Format = ""
	// HellaSwag is Rowan/hellaswag's: ctx (or ctx_a and ctx_b, with
	// activity_label), endings, and label, a string or a number.
	HellaSwag Format = "hellaswag"
	// PIQA is the PIQA dataset's: goal, sol1, sol2 and label (0 or 1).
	PIQA Format = "piqa"
	// ARC is allenai/ai2_arc's: question, choices.text, choices.label and
	// answerKey, one of choices.label.
	ARC Format = "arc"
	// Generic is context, choices and answer: the index of the right
	// choice from 0, or its text.
	Generic Format = "generic"
)

// Formats lists the formats ReadFile knows, with the fields that tell
// them.
func Formats() []Format { return []Format{HellaSwag, PIQA, ARC, Generic} }

// fields are the fields each format needs, as errors name them.
var fields = map[Format]string{
	HellaSwag: "ctx, endings, label",
	PIQA:      "goal, sol1, sol2, label",
	ARC:       "question, choices.text, choices.label, answerKey",
	Generic:   "context, choices, answer",
}

// ParseFormat returns the format called name ("" or "auto" for Auto).
func ParseFormat(name string) (Format, error) {
	if name == "" || name == "auto" {
		return Auto, nil
	}
	f := Format(strings.ToLower(name))
	if _, ok := fields[f]; !ok {
		return Auto, fmt.Errorf("unknown multiple-choice format %q: %s", name, known())
	}
	return f, nil
}

// known lists the formats and their fields, for errors.
func known() string {
	var s []string
	for _, f := range Formats() {
		s = append(s, fmt.Sprintf("%s (%s)", f, fields[f]))
	}
	return "known formats: " + strings.Join(s, "; ")
}

// A Set is the examples of one file.
type Set struct {
	Path     string
	Format   Format
	Examples []Example
}

// ReadFile reads the multiple-choice examples of a file of JSON lines
// (.jsonl, .ndjson, .json with an object per line) or Parquet (.parquet)
// in format f, or in the format its first record's fields tell when f is
// Auto. Every example must have at least two choices and a label among
// them. Errors name the file and the line (the row, from 1, for
// Parquet): path:N: what is wrong.
func ReadFile(path string, f Format) (*Set, error) {
	file, err := regular.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var recs records
	if strings.HasSuffix(strings.ToLower(path), ".parquet") {
		if recs, err = openParquet(file); err != nil {
			return nil, fmt.Errorf("%s: not a Parquet file polysketch can read: %v", path, err)
		}
		defer recs.(*parquetRecords).r.Close()
	} else {
		recs = &jsonRecords{r: bufio.NewReader(file)}
	}
	set := &Set{Path: path, Format: f}
	for {
		rec, line, err := recs.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		if set.Format == Auto {
			if set.Format = detect(rec); set.Format == Auto {
				return nil, fmt.Errorf("%s: no known multiple-choice format: its first record has the fields %s; %s", path, fieldNames(rec), known())
			}
		}
		ex, err := parse(set.Format, rec)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		ex.Line = line
		set.Examples = append(set.Examples, ex)
	}
	if len(set.Examples) == 0 {
		return nil, fmt.Errorf("%s: no examples", path)
	}
	return set, nil
}

// records reads a file's records one at a time: each with its line (or
// row) number from 1, io.EOF after the last.
type records interface {
	next() (rec map[string]any, line int, err error)
}

// jsonRecords reads the objects of JSON lines, skipping blank lines;
// numbers stay json.Number.
type jsonRecords struct {
	r    *bufio.Reader
	line int
	eof  bool
}

func (j *jsonRecords) next() (map[string]any, int, error) {
	for !j.eof {
		b, err := j.r.ReadBytes('\n')
		j.line++
		if err == io.EOF {
			j.eof = true
		} else if err != nil {
			return nil, j.line, err
		}
		if j.line == 1 {
			b = bytes.TrimPrefix(b, []byte("\ufeff")) // a byte order mark, as some editors write
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			rec, err := decodeLine(t)
			return rec, j.line, err
		}
	}
	return nil, j.line, io.EOF
}

// decodeLine decodes one line of JSON lines: a JSON object.
func decodeLine(b []byte) (map[string]any, error) {
	if !utf8.Valid(b) {
		return nil, errors.New("not valid UTF-8")
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if d.More() {
		return nil, errors.New("more than one JSON value on the line: want one object a line (JSON lines)")
	}
	rec, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a JSON %s, not an object", kindOf(v))
	}
	return rec, nil
}

// parquetRecords reads the rows of a Parquet file as maps.
type parquetRecords struct {
	r    *parquet.GenericReader[map[string]any]
	buf  []map[string]any
	i, n int
	line int
	err  error // after buf[i:n]
}

func openParquet(file *os.File) (*parquetRecords, error) {
	info, err := file.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := parquet.OpenFile(file, info.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, err
	}
	return &parquetRecords{r: parquet.NewGenericReader[map[string]any](file, pf.Schema()), buf: make([]map[string]any, 64)}, nil
}

func (p *parquetRecords) next() (map[string]any, int, error) {
	for p.i == p.n {
		if p.err != nil {
			if p.err != io.EOF {
				return nil, p.line + 1, fmt.Errorf("reading Parquet: %v", p.err)
			}
			return nil, p.line, io.EOF
		}
		for i := range p.buf {
			p.buf[i] = map[string]any{} // the reader fills the maps it is given
		}
		p.i = 0
		p.n, p.err = p.r.Read(p.buf)
	}
	p.line++
	p.i++
	return p.buf[p.i-1], p.line, nil
}

// detect returns the format whose fields rec has, or Auto.
func detect(rec map[string]any) Format {
	has := func(names ...string) bool {
		for _, n := range names {
			if _, ok := lookup(rec, n); !ok {
				return false
			}
		}
		return true
	}
	switch {
	case has("endings", "label") && (has("ctx") || has("ctx_a", "ctx_b")):
		return HellaSwag
	case has("goal", "sol1", "sol2", "label"):
		return PIQA
	case has("question", "choices.text", "choices.label", "answerKey"):
		return ARC
	case has("context", "choices", "answer"):
		return Generic
	}
	return Auto
}

// fieldNames lists rec's fields, nested ones dotted, for errors.
func fieldNames(rec map[string]any) string {
	var names []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if sub, ok := m[k].(map[string]any); ok && len(sub) > 0 {
				walk(prefix+k+".", sub)
				continue
			}
			if m[k] == nil {
				names = append(names, prefix+k+" (null)") // present, but no value of a format
				continue
			}
			names = append(names, prefix+k)
		}
	}
	walk("", rec)
	if len(names) == 0 {
		return "(none)"
	}
	if len(names) > 16 {
		names = append(names[:16], fmt.Sprintf("and %d more", len(names)-16))
	}
	return strings.Join(names, ", ")
}

// lookup returns the value at a dotted path of nested objects.
func lookup(rec map[string]any, path string) (any, bool) {
	var v any = rec
	for part := range strings.SplitSeq(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[part]; !ok {
			return nil, false
		}
	}
	return v, v != nil
}

// record reads the fields of one record of format f, remembering the
// first error.
type record struct {
	rec map[string]any
	f   Format
	err error
}

func (r *record) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *record) get(field string) (any, bool) {
	v, ok := lookup(r.rec, field)
	if !ok {
		r.fail("no field %s, which the %s format needs (%s)", field, r.f, fields[r.f])
	}
	return v, ok
}

func (r *record) has(field string) bool {
	_, ok := lookup(r.rec, field)
	return ok
}

func (r *record) str(field string) string {
	v, ok := r.get(field)
	if !ok {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		r.fail("field %s is a %s, want a string", field, kindOf(v))
	}
	return s
}

func (r *record) strs(field string) []string {
	v, ok := r.get(field)
	if !ok {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		r.fail("field %s is a %s, want a list of strings", field, kindOf(v))
		return nil
	}
	out := make([]string, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			r.fail("field %s[%d] is a %s, want a string", field, i, kindOf(e))
			return nil
		}
		out[i] = s
	}
	return out
}

// index reads a label: a whole number, or a string holding one.
func (r *record) index(field string) int {
	v, ok := r.get(field)
	if !ok {
		return 0
	}
	var s string
	switch v := v.(type) {
	case json.Number:
		s = v.String()
	case string:
		s = strings.TrimSpace(v)
	case int64:
		return int(v)
	case int32:
		return int(v)
	case float64:
		if v == float64(int(v)) {
			return int(v)
		}
		s = fmt.Sprint(v)
	default:
		r.fail("field %s is a %s, want a whole number", field, kindOf(v))
		return 0
	}
	if s == "" {
		r.fail("field %s is empty: the example has no answer to score against (an unlabeled split, as HellaSwag's test split is? take one with labels, such as validation)", field)
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		r.fail("field %s is %q, want a whole number", field, s)
	}
	return n
}

// kindOf names the JSON kind of a decoded value.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number, float64, float32, int64, int32, int:
		return "number"
	case []any:
		return "list"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// parse returns the example rec holds in format f, checked.
func parse(f Format, rec map[string]any) (Example, error) {
	r := &record{rec: rec, f: f}
	var ex Example
	switch f {
	case HellaSwag:
		// lm-evaluation-harness's hellaswag task: the activity label,
		// the two halves of the context with the second capitalized,
		// all cleaned of WikiHow's bracketed markup.
		ctx := ""
		if r.has("ctx_a") && r.has("ctx_b") {
			ctx = r.str("ctx_a") + " " + capitalize(r.str("ctx_b"))
		} else {
			ctx = r.str("ctx")
		}
		if r.has("activity_label") {
			ctx = r.str("activity_label") + ": " + ctx
		}
		ex.Query = preprocess(ctx)
		for _, e := range r.strs("endings") {
			ex.Choices = append(ex.Choices, preprocess(e))
		}
		ex.Label = r.index("label")
	case PIQA:
		ex.Query = "Question: " + r.str("goal") + "\nAnswer:"
		ex.Choices = []string{r.str("sol1"), r.str("sol2")}
		ex.Label = r.index("label")
	case ARC:
		ex.Query = "Question: " + r.str("question") + "\nAnswer:"
		ex.Choices = r.strs("choices.text")
		labels := r.strs("choices.label")
		key := r.str("answerKey")
		if r.err == nil {
			if len(labels) != len(ex.Choices) {
				r.fail("%d choices.label for %d choices.text", len(labels), len(ex.Choices))
			}
			if ex.Label = slices.Index(labels, key); ex.Label < 0 {
				r.fail("answerKey %q is none of choices.label %q", key, labels)
			}
		}
	case Generic:
		ex.Query = r.str("context")
		ex.Choices = r.strs("choices")
		if a, ok := r.get("answer"); ok {
			if s, isStr := a.(string); isStr {
				if _, err := strconv.Atoi(strings.TrimSpace(s)); err != nil {
					if ex.Label = slices.Index(ex.Choices, s); ex.Label < 0 && r.err == nil {
						r.fail("answer %q is none of the choices", s)
					}
					break
				}
			}
			ex.Label = r.index("answer")
		}
	}
	if r.err != nil {
		return ex, r.err
	}
	if n := len(ex.Choices); n < 2 {
		return ex, fmt.Errorf("%d choices: a question needs at least 2", n)
	}
	if ex.Label < 0 || ex.Label >= len(ex.Choices) {
		return ex, fmt.Errorf("label %d out of range: %d choices, numbered from 0", ex.Label, len(ex.Choices))
	}
	return ex, nil
}

// bracketed is WikiHow's markup in HellaSwag, [header] and the like.
var bracketed = regexp.MustCompile(`\[.*?\]`)

// preprocess is lm-evaluation-harness's cleaning of HellaSwag's texts.
func preprocess(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, " [title]", ". ")
	s = bracketed.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, "  ", " ")
}

// capitalize is Python's str.capitalize: the first character in title
// case, the others in lower case.
func capitalize(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + strings.ToLower(s[n:])
}
