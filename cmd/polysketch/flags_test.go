package main

import (
	"errors"
	"flag"
	"fmt"
	"testing"

	"github.com/polysketch/polysketch/internal/field"
)

// TestAsCLI checks how a command says the library's errors: in one line,
// each field the command has a flag for named as that flag, the others
// by the library's names, and what the error wraps still found.
func TestAsCLI(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Int("dim", 0, "")
	fs.Int("task-count", 0, "")
	fs.String("text-field", "", "")
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("plain"), "plain"},
		{fmt.Errorf("model: %w", errors.Join(field.Invalid("dim", 0, "must be positive"), field.Invalid("context", 0, "must be positive"))),
			"model: --dim 0: must be positive; context 0: must be positive"},
		{field.Invalid("task.count", 3, "too many"), "--task-count 3: too many"},
		{field.Errorf("x.jsonl:1: no %q field: set %s to the field that holds the text", "text", field.Name("text_field")),
			`x.jsonl:1: no "text" field: set --text-field to the field that holds the text`},
	}
	for _, tt := range tests {
		err := tt.err
		asCLI(fs, &err)
		if got := fmt.Sprint(err); tt.err != nil && got != tt.want || tt.err == nil && err != nil {
			t.Errorf("asCLI(%q) = %q, want %q", tt.err, got, tt.want)
		}
		if tt.err != nil && !errors.Is(err, tt.err) {
			t.Errorf("asCLI(%q) lost what it wraps", tt.err)
		}
	}
}
