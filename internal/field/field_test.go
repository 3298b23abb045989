package field

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func flag(name string) string { return "--" + strings.ReplaceAll(name, "_", "-") }

func TestRename(t *testing.T) {
	inner := Invalid("sketch_size", 0, "must be positive")
	tests := []struct {
		name      string
		err       error
		lib, flag string
	}{
		{"invalid", inner, "sketch_size 0: must be positive", "--sketch-size 0: must be positive"},
		{"string value", Invalid("sketch", "fourier", "use %q or %q", "gaussian", "srht"),
			`sketch "fourier": use "gaussian" or "srht"`, `--sketch "fourier": use "gaussian" or "srht"`},
		{"several names", Errorf("%s %q: %d values for %s %d", Name("coefficients"), "1,2", 2, Name("degree"), 3),
			`coefficients "1,2": 2 values for degree 3`, `--coefficients "1,2": 2 values for --degree 3`},
		{"wrapped", fmt.Errorf("polysketch attention: %w", inner),
			"polysketch attention: sketch_size 0: must be positive", "polysketch attention: --sketch-size 0: must be positive"},
		{"joined", errors.Join(inner, Invalid("block", -1, "must be positive"), errors.New("min_lr 3 is plain")),
			"sketch_size 0: must be positive\nblock -1: must be positive\nmin_lr 3 is plain",
			"--sketch-size 0: must be positive\n--block -1: must be positive\nmin_lr 3 is plain"},
		{"nested", Errorf("model: %w", Errorf("%s of %s: %w", Name("block"), Name("attention"), inner)),
			"model: block of attention: sketch_size 0: must be positive", "model: --block of --attention: --sketch-size 0: must be positive"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.lib {
			t.Errorf("%s: Error() = %q, want %q", tt.name, got, tt.lib)
		}
		if got := Rename(tt.err, flag); got != tt.flag {
			t.Errorf("%s: Rename = %q, want %q", tt.name, got, tt.flag)
		}
	}
}

func TestUnwrap(t *testing.T) {
	err := Errorf("%s: %w", Name("corpus"), io.ErrUnexpectedEOF)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("%v does not wrap io.ErrUnexpectedEOF", err)
	}
	if errors.Is(Errorf("%s: %v", Name("corpus"), io.ErrUnexpectedEOF), io.ErrUnexpectedEOF) {
		t.Error("an error formatted with a v verb is wrapped")
	}
	var fe *Error
	if !errors.As(fmt.Errorf("x: %w", err), &fe) {
		t.Error("errors.As finds no *Error")
	}
}

// A library names the field by its JSON name; a command line renames it
// to the flag that sets it.
func ExampleRename() {
	err := fmt.Errorf("polysketch attention: %w", Invalid("sketch_size", 0, "must be positive"))
	fmt.Println(err)
	fmt.Println(Rename(err, func(f string) string { return "--" + strings.ReplaceAll(f, "_", "-") }))
	// Output:
	// polysketch attention: sketch_size 0: must be positive
	// polysketch attention: --sketch-size 0: must be positive
}
