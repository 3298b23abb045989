package task

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/data/tokenizer"
)

func TestRead(t *testing.T) {
	in := `{"input": [5, 6], "target": [7, 8]}

{"input": "ab", "target": "c"}
`
	exs, err := Read(strings.NewReader(in), tokenizer.Byte, 5)
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{Tokens: []int32{5, 6, 7, 0, 0}, Targets: []int32{-1, 7, 8, -1, -1}},
		{Tokens: []int32{'a', 'b', 0, 0, 0}, Targets: []int32{-1, 'c', -1, -1, -1}},
	}
	for i := range want {
		if !slices.Equal(exs[i].Tokens, want[i].Tokens) || !slices.Equal(exs[i].Targets, want[i].Targets) {
			t.Errorf("example %d: %+v, want %+v", i, exs[i], want[i])
		}
	}
}

func TestReadErrors(t *testing.T) {
	good := `{"input": [1], "target": [2]}` + "\n"
	tests := []struct {
		in, want string
	}{
		{good + `{"input": [1], "target": [2]`, ":2: not a JSON object"},
		{good + good + `{"input": [1, 300], "target": [2]}`, ":3: input: token id 300 outside"},
		{`{"input": [1], "target": []}`, ":1: input of 1 tokens and target of 0"},
		{`{"input": [1]}`, `:1: want both "input" and "target"`},
		{`{"input": [1], "target": [2], "extra": 1}`, `:1: not a JSON object`},
		{`{"input": [1,2,3,4,5], "target": [2,3]}`, ":1: input of 5 tokens and target of 2 make 6 positions, more than the context 5"},
		{`{"input": 3, "target": [2]}`, ":1: input: want a list of token ids or a string"},
		{"\n\n", "no examples"},
	}
	for _, tt := range tests {
		exs, err := Read(strings.NewReader(tt.in), tokenizer.Byte, 5)
		if err == nil || !strings.Contains(err.Error(), tt.want) || exs != nil {
			t.Errorf("%q: %d examples, error %v; want none and an error containing %q", tt.in, len(exs), err, tt.want)
		}
	}
}

func TestFileSet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.jsonl")
	var b strings.Builder
	for i := range 10 {
		b.WriteString(`{"input": [` + string(rune('1'+i%9)) + `], "target": [9, 9]}` + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := New(Spec{Name: File, Path: path, Length: 4, Test: 2, Seed: 1}, tokenizer.Byte)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Test) != 2 || set.Test[1].Tokens[0] != 1 {
		t.Fatalf("test set %+v: want the last 2 lines", set.Test)
	}
	if set.Vocab() != 256 {
		t.Errorf("vocab %d, want the tokenizer's 256", set.Vocab())
	}
	if _, err := New(Spec{Name: File, Path: path, Length: 4, Test: 10, Seed: 1}, tokenizer.Byte); err == nil || !strings.Contains(err.Error(), "not enough") {
		t.Errorf("holding out every example: error %v", err)
	}
	if _, err := New(Spec{Name: File, Path: filepath.Join(dir, "none"), Length: 4, Test: 1}, tokenizer.Byte); err == nil {
		t.Error("missing file: no error")
	}
}

func TestFileAllHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "same.jsonl")
	line := `{"input": [1], "target": [2]}` + "\n"
	if err := os.WriteFile(path, []byte(strings.Repeat(line, 5)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Spec{Name: File, Path: path, Length: 4, Test: 1}, tokenizer.Byte); err == nil || !strings.Contains(err.Error(), "repeats a test example") {
		t.Errorf("five equal lines: error %v", err)
	}
}
