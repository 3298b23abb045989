// Package task makes the synthetic reasoning tasks that PolySketchFormer
// and the thesis compare attention mechanisms on (selective copying,
// induction heads, multi-query associative recall, sequence reversal), reads
// tasks of users' own from JSON-lines files, and scores a model on them.
//
// An [Example] is one sequence of Length token ids with a target per
// position: the id the model must predict there, or -1 where nothing is
// scored. Only answer positions carry targets, so the loss, the per-token
// accuracy and the exact match ([Score]) count nothing else.
//
// A [Set] holds a task's held-out test examples and draws its training
// examples, each a pure function of the seed and its index, so a run that
// resumes at index i sees what an uninterrupted one would. Test examples
// come from a stream of their own, and a training draw equal to a test
// example is skipped, so that no test example is ever trained on.
package task

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/polysketch/polysketch/data/tokenizer"
)

// Example is one sequence and its targets.
type Example struct {
	Tokens  []int32 // Length ids, the model's input
	Targets []int32 // Length targets: the id to predict at each position, or -1
}

// Spec names a task and its parameters. Checkpoints store it as JSON in
// the training configuration, so that a resumed run rebuilds the same task.
type Spec struct {
	// Name is a built-in task (Names) or File, for a task file.
	Name string `json:"name"`
	// Path is the task file of Name "file" (see ReadFile).
	Path string `json:"path,omitempty"`
	// Length is the tokens of each example: the model's context.
	Length int `json:"length"`
	// Vocab is the task's alphabet: every id of selective-copy and mqar
	// (noise and markers included), the random tokens of induction-heads
	// (the special token is one more), the digits of reversal (the
	// separator is one more). Unused by task files.
	Vocab int `json:"vocab,omitempty"`
	// Count is the tokens to copy (selective-copy), the key-value pairs
	// (mqar) or the digits to reverse (reversal).
	Count int `json:"count,omitempty"`
	// Bidirectional asks for a task's form for an encoder-only model
	// (reversal only, the thesis's): the Count digits alone, and at each
	// position the digit at the mirrored position as its target.
	Bidirectional bool `json:"bidirectional,omitempty"`
	// Train is the number of distinct training examples, drawn over and
	// over (the papers' 64k); 0 draws a fresh one every time.
	Train int `json:"train,omitempty"`
	// Test is the number of held-out test examples (for a file: its last
	// Test examples; 0 means a tenth of them).
	Test int `json:"test"`
	// Seed fixes every example.
	Seed uint64 `json:"seed"`
}

// File is the Spec.Name of a task read from a file.
const File = "file"

// The built-in tasks.
const (
	SelectiveCopy  = "selective-copy"
	InductionHeads = "induction-heads"
	MQAR           = "mqar"
	Reversal       = "reversal"
)

// Names lists the built-in tasks.
func Names() []string { return []string{SelectiveCopy, InductionHeads, MQAR, Reversal} }

// Default returns the spec of the built-in task name with the seeds'
// parameters scaled to a CPU, or an error listing the valid names.
//
//   - selective-copy: length 256, vocabulary 16 (noise 0, data 1…14,
//     marker 15, Mamba's), 16 tokens to copy;
//   - induction-heads: length 128, 16 random tokens plus the special one
//     (003 App. F.2);
//   - mqar: length 128, vocabulary 256, 8 key-value pairs;
//   - reversal: 50 digits 0…9 (thesis §5), so length 100 for a decoder
//     (the digits, a separator, the reversed digits but the last).
//
// Every one holds out 512 test examples and draws fresh training examples.
func Default(name string) (Spec, error) {
	s := Spec{Name: name, Test: 512, Seed: 1}
	switch name {
	case SelectiveCopy:
		s.Length, s.Vocab, s.Count = 256, 16, 16
	case InductionHeads:
		s.Length, s.Vocab = 128, 16
	case MQAR:
		s.Length, s.Vocab, s.Count = 128, 256, 8
	case Reversal:
		s.Length, s.Vocab, s.Count = 100, 10, 50
	default:
		return Spec{}, unknown(name)
	}
	return s, nil
}

func unknown(name string) error {
	return fmt.Errorf("unknown task %q: choose one of %s, or give a JSON-lines task file", name, strings.Join(Names(), ", "))
}

// Validate reports, in one line each, every parameter that cannot produce
// a valid example, before anything is generated or trained.
func (s Spec) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Length < 1 {
		add("task length %d: must be positive", s.Length)
	}
	if s.Train < 0 {
		add("task train %d: must be 0 (fresh examples) or positive", s.Train)
	}
	if s.Test < 1 && !(s.Name == File && s.Test == 0) {
		add("task test %d: need at least 1 test example", s.Test)
	}
	switch s.Name {
	case File:
		if s.Path == "" {
			add("task file: no path given")
		}
		return errors.Join(errs...)
	case SelectiveCopy:
		switch {
		case s.Vocab < 3:
			add("selective-copy vocabulary %d: need at least 3 (noise, one data token, marker)", s.Vocab)
		case s.Count < 1:
			add("selective-copy count %d: need at least 1 token to copy", s.Count)
		case 2*s.Count > s.Length:
			add("selective-copy: %d tokens to copy need %d slots and %d markers, more than length %d: copy at most %d, or raise the length",
				s.Count, s.Count, s.Count, s.Length, s.Length/2)
		}
	case InductionHeads:
		if s.Vocab < 2 {
			add("induction-heads vocabulary %d: need at least 2 tokens", s.Vocab)
		}
		if s.Length < 4 {
			add("induction-heads length %d: need at least 4 (a special token, the token after it, the trigger and the answer)", s.Length)
		}
	case MQAR:
		switch {
		case s.Count < 1:
			add("mqar count %d: need at least 1 key-value pair", s.Count)
		case s.Vocab/2-1 < s.Count:
			add("mqar vocabulary %d: its keys 1…%d are too few for %d distinct keys: raise the vocabulary to %d or more",
				s.Vocab, s.Vocab/2-1, s.Count, 2*s.Count+2)
		case 4*s.Count > s.Length:
			add("mqar length %d: %d key-value pairs and their %d queries need length %d or more", s.Length, s.Count, s.Count, 4*s.Count)
		}
	case Reversal:
		switch {
		case s.Vocab < 2:
			add("reversal vocabulary %d: need at least 2 digits", s.Vocab)
		case s.Count < 1:
			add("reversal count %d: need at least 1 digit", s.Count)
		case s.Bidirectional && s.Count != s.Length:
			add("bidirectional reversal: %d digits in length %d: the encoder's form is the digits alone, so they must be equal", s.Count, s.Length)
		case !s.Bidirectional && 2*s.Count > s.Length:
			add("reversal: %d digits need length %d (digits, separator, reversed digits), more than %d", s.Count, 2*s.Count, s.Length)
		}
	default:
		return unknown(s.Name)
	}
	if s.Bidirectional && s.Name != Reversal {
		add("%s has no bidirectional form: only reversal does", s.Name)
	}
	if len(errs) == 0 {
		// Rejecting training draws equal to test examples must leave most
		// draws: the task must have many more examples than the test set.
		if bits := s.spaceBits(); bits < math.Log2(float64(s.Test))+3 {
			add("%s: only about 2^%.1f different examples, too few to hold out %d test examples and train on others: lower the test examples or enlarge the task",
				s.Name, bits, s.Test)
		}
	}
	return errors.Join(errs...)
}

// spaceBits returns about log2 of the number of different examples.
func (s Spec) spaceBits() float64 {
	lg := math.Log2
	switch s.Name {
	case SelectiveCopy:
		slots := s.Length - s.Count
		return lchoose(slots, s.Count) + float64(s.Count)*lg(float64(s.Vocab-2))
	case InductionHeads:
		return lg(float64(s.Length-3)) + float64(s.Length-3)*lg(float64(s.Vocab))
	case MQAR:
		k, v := s.Vocab/2-1, s.Vocab-s.Vocab/2
		return lperm(k, s.Count) + lperm(v, s.Count)
	case Reversal:
		return float64(s.Count) * lg(float64(s.Vocab))
	}
	return math.Inf(1)
}

// lchoose returns log2 of n choose k.
func lchoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return (a - b - c) / math.Ln2
}

// lperm returns log2 of n!/(n-k)!.
func lperm(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return (a - c) / math.Ln2
}

// IDs returns the number of token ids of a built-in task (its Vocab and
// special tokens): the vocabulary of a model that learns it. A task
// file's ids are its tokenizer's.
func (s Spec) IDs() int {
	switch {
	case s.Name == InductionHeads, s.Name == Reversal && !s.Bidirectional:
		return s.Vocab + 1
	}
	return s.Vocab
}

// Set is a task ready to train on: its test examples and its stream of
// training examples.
type Set struct {
	Spec Spec
	// Test holds the held-out test examples.
	Test []Example

	vocab int
	gen   func(rng *rand.Rand, ex *Example)
	file  []Example // training examples of a task file
	held  map[uint64]bool
}

// New validates spec and makes its test set. A task file is read with tok
// (see ReadFile); built-in tasks ignore tok.
func New(spec Spec, tok tokenizer.Tokenizer) (*Set, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	s := &Set{Spec: spec, held: make(map[uint64]bool)}
	switch spec.Name {
	case File:
		all, err := ReadFile(spec.Path, tok, spec.Length)
		if err != nil {
			return nil, err
		}
		if spec.Test == 0 {
			spec.Test = max(1, len(all)/10)
		}
		if len(all) <= spec.Test {
			return nil, fmt.Errorf("task file %s: %d examples, not enough to hold out %d for testing and train on the rest: lower the test examples", spec.Path, len(all), spec.Test)
		}
		s.vocab = tok.VocabSize()
		s.Test = all[len(all)-spec.Test:]
		for _, ex := range s.Test {
			s.held[hash(ex)] = true
		}
		// Lines equal to a test example are not trained on.
		for _, ex := range all[:len(all)-spec.Test] {
			if !s.held[hash(ex)] {
				s.file = append(s.file, ex)
			}
		}
		if len(s.file) == 0 {
			return nil, fmt.Errorf("task file %s: every training line repeats a test example (the last %d lines): add different examples", spec.Path, spec.Test)
		}
		return s, nil
	case SelectiveCopy:
		s.gen = spec.selectiveCopy
	case InductionHeads:
		s.gen = spec.inductionHeads
	case MQAR:
		s.gen = spec.mqar
	case Reversal:
		s.gen = spec.reversal
		if spec.Bidirectional {
			s.gen = spec.mirror
		}
	}
	s.vocab = spec.IDs()
	// Distinct test examples from a stream of their own.
	rng := rand.New(rand.NewPCG(mix(spec.Seed, testStream), 0))
	for len(s.Test) < spec.Test {
		var ex Example
		s.gen(rng, &ex)
		if h := hash(ex); !s.held[h] {
			s.held[h] = true
			s.Test = append(s.Test, ex)
		}
	}
	if err := s.checkPool(); err != nil {
		return nil, err
	}
	return s, nil
}

// NewTest returns a set for scoring a model trained on the task file of
// spec on another file, path: all of its examples, read with tok at the
// spec's length, are its test examples. It has no training examples:
// Draw must not be called.
func NewTest(spec Spec, path string, tok tokenizer.Tokenizer) (*Set, error) {
	if spec.Name != File {
		return nil, fmt.Errorf("task %s is built in: only a model trained on a task file is scored on another file", spec.Name)
	}
	exs, err := ReadFile(path, tok, spec.Length)
	if err != nil {
		return nil, err
	}
	spec.Path, spec.Test = path, len(exs)
	return &Set{Spec: spec, Test: exs, vocab: tok.VocabSize()}, nil
}

// checkPool makes sure that a finite pool of training examples (Spec.Train)
// holds at least one that is not a test example, or Draw would never
// return.
func (s *Set) checkPool() error {
	if s.Spec.Train == 0 {
		return nil
	}
	var ex Example
	for i := range uint64(s.Spec.Train) {
		rng := rand.New(rand.NewPCG(mix(s.Spec.Seed, trainStream), i))
		s.gen(rng, &ex)
		if !s.held[hash(ex)] {
			return nil
		}
	}
	return fmt.Errorf("%s: each of the %d training examples is also a test example: raise the training examples (0 for fresh ones)", s.Spec.Name, s.Spec.Train)
}

// Vocab returns the number of token ids of the task: the vocabulary of a
// model that learns it.
func (s *Set) Vocab() int { return s.vocab }

// Length returns the tokens of every example.
func (s *Set) Length() int { return s.Spec.Length }

const (
	trainStream = 1
	testStream  = 2
)

// Draw writes the training example at stream position *next into ex and
// advances *next past it, skipping any draw equal to a test example. The
// stream is a pure function of the spec: a run that saves *next and
// resumes from it sees the same examples.
func (s *Set) Draw(ex *Example, next *uint64) {
	for {
		i := *next
		*next++
		if s.Spec.Train > 0 {
			i %= uint64(s.Spec.Train)
		}
		rng := rand.New(rand.NewPCG(mix(s.Spec.Seed, trainStream), i))
		if s.file != nil {
			src := s.file[rng.IntN(len(s.file))]
			ex.Tokens = append(ex.Tokens[:0], src.Tokens...)
			ex.Targets = append(ex.Targets[:0], src.Targets...)
		} else {
			s.gen(rng, ex)
		}
		if !s.held[hash(*ex)] {
			return
		}
	}
}

// mix derives the seed of a stream from the task's seed (SplitMix64's
// finalizer).
func mix(seed uint64, stream int) uint64 {
	z := seed + uint64(stream)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// hash returns a 64-bit hash of an example's tokens and targets. Two
// examples with the same hash are taken to be the same; a collision only
// costs a training draw.
func hash(ex Example) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, s := range [][]int32{ex.Tokens, ex.Targets} {
		for _, t := range s {
			b[0], b[1], b[2], b[3] = byte(t), byte(t>>8), byte(t>>16), byte(t>>24)
			h.Write(b[:])
		}
		h.Write([]byte{0xff})
	}
	return h.Sum64()
}

// reset sizes ex to n positions: tokens 0, targets -1.
func reset(ex *Example, n int) {
	ex.Tokens = slices.Grow(ex.Tokens[:0], n)[:n]
	clear(ex.Tokens)
	ex.Targets = slices.Grow(ex.Targets[:0], n)[:n]
	for i := range ex.Targets {
		ex.Targets[i] = -1
	}
}
