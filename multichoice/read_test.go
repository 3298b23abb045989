package multichoice

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadFile reads the hand-written file of each format, as JSON lines
// and as the Parquet that an independent writer (parquet-wasm, see
// testdata/parquet.mjs) made of it, recognized and named: the same
// questions, laid out as lm-evaluation-harness's tasks lay them out.
func TestReadFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format Format
		n      int
		// one example, in full
		at   int
		want Example
	}{
		{"hellaswag", HellaSwag, 5, 2, Example{
			// [header] and [substeps] removed, [title] a full stop, the
			// second half capitalized, double spaces made single.
			Query: "Home and Garden: How to water a cactus. Check the soil. Make sure it is completely dry",
			Choices: []string{
				"before you water. Push a finger into the soil.", "and then bury the cactus.",
				"with a hair dryer every morning.", "by asking the cactus.",
			},
			Label: 0, Line: 3,
		}},
		{"piqa", PIQA, 4, 1, Example{
			Query:   "Question: How do you open a jar whose lid is stuck?\nAnswer:",
			Choices: []string{"Freeze the jar overnight.", "Run the lid under hot water, then twist it."},
			Label:   1, Line: 2,
		}},
		{"arc", ARC, 4, 2, Example{
			Query:   "Question: Water freezes at what temperature in degrees Celsius?\nAnswer:",
			Choices: []string{"100", "50", "0", "-40", "25"},
			Label:   2, Line: 3, // answerKey "3" of the labels "1" … "5"
		}},
		{"generic", Generic, 4, 3, Example{
			Query: "Un café, s'il vous", Choices: []string{"plaît", "wheel"}, Label: 0, Line: 4, // the answer by its text
		}},
	} {
		exts := []string{".jsonl", ".parquet"}
		if tc.format == Generic {
			exts = exts[:1]
		}
		var sets []*Set
		for _, ext := range exts {
			path := filepath.Join("testdata", tc.name+ext)
			for _, f := range []Format{Auto, tc.format} {
				set, err := ReadFile(path, f)
				if err != nil {
					t.Fatalf("%s as %q: %v", path, f, err)
				}
				if set.Format != tc.format || len(set.Examples) != tc.n {
					t.Fatalf("%s as %q: format %q, %d examples; want %q, %d", path, f, set.Format, len(set.Examples), tc.format, tc.n)
				}
				if got := set.Examples[tc.at]; !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%s, example %d:\n got %#v\nwant %#v", path, tc.at, got, tc.want)
				}
				sets = append(sets, set)
			}
		}
		for _, s := range sets[1:] {
			if !reflect.DeepEqual(s.Examples, sets[0].Examples) {
				t.Errorf("%s: the examples of %s differ from those of %s", tc.name, s.Path, sets[0].Path)
			}
		}
	}
	// The context of a HellaSwag example whose second half is empty, and
	// a choice with a character of two bytes.
	set, err := ReadFile("testdata/hellaswag.jsonl", Auto)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := set.Examples[4].Query, "Playing the piano: A girl sits down at a piano."; got != want {
		t.Errorf("query %q, want %q", got, want)
	}
	if got, want := set.Examples[3].Choices[2], "pours the flour into a café au lait."; got != want {
		t.Errorf("choice %q, want %q", got, want)
	}
}

// TestReadFileErrors checks that bad files are refused in one line that
// says where and what: a file in no known format names the fields it
// found and the formats known; a bad example its file and line.
// TestReadFileBOM reads JSON lines that begin with a byte order mark, as
// some editors save them, as the same lines without.
func TestReadFileBOM(t *testing.T) {
	dir := t.TempDir()
	text := `{"context": "a", "choices": ["b", "c"], "answer": 1}` + "\n"
	var sets []*Set
	for _, name := range []string{"plain.jsonl", "bom.jsonl"} {
		path := filepath.Join(dir, name)
		if name == "bom.jsonl" {
			text = "\ufeff" + text
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		set, err := ReadFile(path, Auto)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sets = append(sets, set)
	}
	if !reflect.DeepEqual(sets[0].Examples, sets[1].Examples) || sets[0].Format != sets[1].Format {
		t.Errorf("with a byte order mark %+v (%s), without %+v (%s)", sets[1].Examples, sets[1].Format, sets[0].Examples, sets[0].Format)
	}
}

func TestReadFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		format     Format
		want       []string
	}{
		{"unknown.jsonl", `{"text": "hello", "meta": {"source": "web"}}`, Auto, []string{
			"unknown.jsonl: no known multiple-choice format", "fields meta.source, text",
			"hellaswag (ctx, endings, label)", "piqa (goal, sol1, sol2, label)",
			"arc (question, choices.text, choices.label, answerKey)", "generic (context, choices, answer)",
		}},
		{"null.jsonl", `{"context": null, "choices": ["b", "c"], "answer": 0}`, Auto, []string{
			"null.jsonl: no known multiple-choice format", "fields answer, choices, context (null)",
		}},
		{"range.jsonl", `{"context": "a", "choices": ["b", "c"], "answer": 0}` + "\n\n" +
			`{"context": "a", "choices": ["b", "c"], "answer": 2}`, Auto, []string{"range.jsonl:3: label 2 out of range: 2 choices"}},
		{"negative.jsonl", `{"goal": "g", "sol1": "a", "sol2": "b", "label": -1}`, Auto, []string{"negative.jsonl:1: label -1 out of range"}},
		{"one.jsonl", `{"context": "a", "choices": ["b"], "answer": 0}`, Auto, []string{"one.jsonl:1: 1 choices: a question needs at least 2"}},
		{"none.jsonl", `{"ctx": "a", "endings": [], "label": "0"}`, Auto, []string{"none.jsonl:1: 0 choices"}},
		{"testsplit.jsonl", `{"ctx": "a", "endings": ["b", "c"], "label": ""}`, Auto, []string{`testsplit.jsonl:1: field label is empty`, "HellaSwag's test split", "such as validation"}},
		{"key.jsonl", `{"question": "q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "C"}`, Auto,
			[]string{`key.jsonl:1: answerKey "C" is none of choices.label ["A" "B"]`}},
		{"missing.jsonl", `{"goal": "g", "sol1": "a", "label": 0}`, PIQA, []string{"missing.jsonl:1: no field sol2, which the piqa format needs (goal, sol1, sol2, label)"}},
		{"type.jsonl", `{"context": "a", "choices": "b, c", "answer": 0}`, Auto, []string{"type.jsonl:1: field choices is a string, want a list of strings"}},
		{"json.jsonl", `{"context": "a", "choices": ["b", "c"], "answer": 0}` + "\n{oops", Auto, []string{"json.jsonl:2: not a JSON object"}},
		{"array.jsonl", `["a", "b"]`, Auto, []string{"array.jsonl:1: a JSON list, not an object"}},
		{"empty.jsonl", "\n\n", Auto, []string{"empty.jsonl: no examples"}},
		{"fake.parquet", "not parquet", Auto, []string{"fake.parquet: not a Parquet file"}},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadFile(path, tc.format)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		msg := strings.TrimPrefix(err.Error(), dir+string(filepath.Separator))
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q, want it to contain %q", tc.name, msg, w)
			}
		}
		if strings.Contains(msg, "\n") {
			t.Errorf("%s: error of several lines: %q", tc.name, msg)
		}
	}
	if _, err := ParseFormat("mmlu"); err == nil || !strings.Contains(err.Error(), "known formats: hellaswag") {
		t.Errorf("ParseFormat(mmlu): %v", err)
	}
}

// TestPrompt checks the layout of a few-shot prompt: each shot's query,
// a space and its answer, a blank line; then the question.
func TestPrompt(t *testing.T) {
	shots := []Example{
		{Query: "Question: A?\nAnswer:", Choices: []string{"no", "yes"}, Label: 1},
		{Query: "Question: B?\nAnswer:", Choices: []string{"b1", "b2"}, Label: 0},
	}
	ex := Example{Query: "Question: C?\nAnswer:", Choices: []string{"x", "y"}}
	want := "Question: A?\nAnswer: yes\n\nQuestion: B?\nAnswer: b1\n\nQuestion: C?\nAnswer:"
	if got := Prompt(ex, shots); got != want {
		t.Errorf("prompt %q, want %q", got, want)
	}
	if got := Continuations(ex); !reflect.DeepEqual(got, []string{" x", " y"}) {
		t.Errorf("continuations %q", got)
	}
}

// TestShots checks that the shots of a question are the same for the
// same seed, differ for another, and never hold the question: neither
// itself when drawn from its own set, nor a copy of it from another.
func TestShots(t *testing.T) {
	var pool []Example
	for i := range 12 {
		pool = append(pool, Example{Query: string(rune('a' + i)), Choices: []string{"x", "y"}, Line: i + 1})
	}
	key := func(exs []Example) string {
		var b strings.Builder
		for _, e := range exs {
			b.WriteString(e.Query)
		}
		return b.String()
	}
	for _, k := range []int{1, 5, 10, 11} {
		differs := false
		for i, ex := range pool {
			s := Shots{K: k, Pool: pool, Seed: 3}
			a, err := s.Draw(ex)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := s.Draw(ex)
			if key(a) != key(b) {
				t.Errorf("k=%d, example %d: shots %q, then %q with the same seed", k, i, key(a), key(b))
			}
			if len(a) != k {
				t.Errorf("k=%d: %d shots", k, len(a))
			}
			seen := map[string]bool{}
			for _, e := range a {
				if e.Query == ex.Query {
					t.Errorf("k=%d, example %d: the question is its own shot", k, i)
				}
				if seen[e.Query] {
					t.Errorf("k=%d, example %d: shot %q twice", k, i, e.Query)
				}
				seen[e.Query] = true
			}
			s.Seed = 4
			c, _ := s.Draw(ex)
			differs = differs || key(c) != key(a)
		}
		if !differs && k < 11 {
			t.Errorf("k=%d: seeds 3 and 4 drew the same shots for every example", k)
		}
	}
	// From another file that holds a copy of the question.
	other := append([]Example(nil), pool[:3]...)
	other[0].Line = 99
	for seed := range uint64(20) {
		got, err := Shots{K: 2, Pool: other, Seed: seed}.Draw(pool[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			if e.Query == pool[0].Query {
				t.Fatal("a copy of the question from another file was drawn as its shot")
			}
		}
	}
	if _, err := (Shots{K: 3, Pool: other}).Draw(pool[0]); err == nil || !strings.Contains(err.Error(), "shots 3: only 2 other examples") {
		t.Errorf("too few to draw from: %v", err)
	}
}

// TestSampleIndices checks that a limit draws that many distinct
// examples, in order, the same for the same seed.
func TestSampleIndices(t *testing.T) {
	a, b, c := sampleIndices(100, 10, 1), sampleIndices(100, 10, 1), sampleIndices(100, 10, 2)
	if !reflect.DeepEqual(a, b) || reflect.DeepEqual(a, c) {
		t.Errorf("seed 1: %v then %v; seed 2: %v", a, b, c)
	}
	for i := 1; i < len(a); i++ {
		if a[i] <= a[i-1] {
			t.Errorf("not ascending: %v", a)
		}
	}
}
