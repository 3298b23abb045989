package task

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/data/tokenizer"
)

func writeTaskFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "task.jsonl")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFileLength(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int
	}{
		// The input and the target but its last token: 2+2−1, 3+1−1.
		{`{"input": [1, 2], "target": [3, 4]}` + "\n" + `{"input": [1, 2, 3], "target": [4]}` + "\n", 3},
		// Strings are encoded by the tokenizer: 5 bytes and 4, less 1.
		{`{"input": [1], "target": [2]}` + "\n\n" + `{"input": "héllo", "target": "abcd"}`, 9},
	} {
		got, err := FileLength(writeTaskFile(t, tc.text), tokenizer.Byte)
		if err != nil || got != tc.want {
			t.Errorf("%q: %d, %v; want %d", tc.text, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ text, want string }{
		{`{"input": [1], "target": [2]}` + "\n" + `{"input": [1]`, ":2: not a JSON object"},
		{"\n", ": no examples"},
	} {
		path := writeTaskFile(t, tc.text)
		if _, err := FileLength(path, tokenizer.Byte); err == nil || !strings.Contains(err.Error(), path+tc.want) {
			t.Errorf("%q: error %v, want %q", tc.text, err, path+tc.want)
		}
	}
}

func TestNewTest(t *testing.T) {
	spec := Spec{Name: File, Path: "train.jsonl", Length: 4, Test: 3, Seed: 1}
	path := writeTaskFile(t, `{"input": [5], "target": [6, 7]}`+"\n"+`{"input": "ab", "target": "c"}`+"\n")
	s, err := NewTest(spec, path, tokenizer.Byte)
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{Tokens: []int32{5, 6, 0, 0}, Targets: []int32{6, 7, -1, -1}},
		{Tokens: []int32{'a', 'b', 0, 0}, Targets: []int32{-1, 'c', -1, -1}},
	}
	if len(s.Test) != len(want) || s.Vocab() != 256 || s.Length() != 4 || s.Spec.Path != path {
		t.Fatalf("set of %d test examples, vocabulary %d, length %d, path %s", len(s.Test), s.Vocab(), s.Length(), s.Spec.Path)
	}
	for i := range want {
		if !slices.Equal(s.Test[i].Tokens, want[i].Tokens) || !slices.Equal(s.Test[i].Targets, want[i].Targets) {
			t.Errorf("example %d: %+v, want %+v", i, s.Test[i], want[i])
		}
	}
	if _, err := NewTest(Spec{Name: MQAR, Length: 4}, path, tokenizer.Byte); err == nil {
		t.Error("a built-in task scored on a file: no error")
	}
	long := writeTaskFile(t, `{"input": [1, 2, 3, 4], "target": [5, 6]}`)
	if _, err := NewTest(spec, long, tokenizer.Byte); err == nil || !strings.Contains(err.Error(), long+":1: ") {
		t.Errorf("an example longer than the model's: %v", err)
	}
}
