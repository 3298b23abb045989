package task

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/regular"
)

// Options choose a task as a user names it and the sizes that differ
// from its defaults; a zero size keeps the task's default.
type Options struct {
	Name          string // a task of Names, or the path of a JSON-lines task file
	Vocab         int    // the alphabet: all ids, the random tokens or the digits
	Count         int    // tokens to copy, key-value pairs or digits
	Train         int    // distinct training examples; 0 for a fresh one every draw
	Test          int    // held-out test examples
	Bidirectional bool   // the encoder form (reversal only)
}

// Options returns the options that describe s: Spec of them, with s's
// length and seed, is s again.
func (s Spec) Options() Options {
	o := Options{Name: s.Name, Vocab: s.Vocab, Count: s.Count, Train: s.Train, Test: s.Test, Bidirectional: s.Bidirectional}
	if s.Name == File {
		o.Name = s.Path
	}
	return o
}

// Spec returns the task o names with its defaults filled in, or nil if o
// names none. length is the examples' length if the user chose it (0: the
// task's default, or a task file's longest example, encoded by the
// tokenizer named tok); seed is the run's. A reversal's digits are those
// that fit the length, unless counted; its encoder form is as long as its
// digits. A task file's test examples are a tenth of its lines unless
// counted.
func (o Options) Spec(length int, seed uint64, tok string) (*Spec, error) {
	if o.Name == "" {
		return nil, nil
	}
	s, err := Default(o.Name)
	if err != nil {
		if slices.Contains(Names(), o.Name) || !isFile(o.Name) {
			return nil, err
		}
		abs, err := filepath.Abs(o.Name)
		if err != nil {
			return nil, err
		}
		s = Spec{Name: File, Path: abs}
	}
	if length > 0 {
		s.Length = length
	} else if s.Name == File {
		t, err := tokenizer.Open(tok)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		if s.Length, err = FileLength(s.Path, t); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		dst *int
		v   int
	}{{&s.Vocab, o.Vocab}, {&s.Count, o.Count}, {&s.Train, o.Train}, {&s.Test, o.Test}} {
		if f.v != 0 {
			*f.dst = f.v
		}
	}
	s.Bidirectional = o.Bidirectional
	switch {
	case s.Name != Reversal:
	case o.Bidirectional && length == 0:
		s.Length = s.Count
	case o.Bidirectional && o.Count == 0:
		s.Count = length
	case o.Count == 0 && length > 0:
		s.Count = length / 2 // the digits that fit
	}
	s.Seed = seed
	if s.Name == File && s.Test == 0 {
		n, err := countLines(s.Path)
		if err != nil {
			return nil, err
		}
		s.Test = max(1, n/10)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// countLines counts the lines of a file that are not blank.
func countLines(path string) (int, error) {
	b, err := regular.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n := 0
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n, nil
}
