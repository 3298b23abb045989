package task

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/data/tokenizer"
)

func newSet(t *testing.T, s Spec) *Set {
	t.Helper()
	set, err := New(s, tokenizer.Byte)
	if err != nil {
		t.Fatalf("New(%+v): %v", s, err)
	}
	return set
}

func TestDefaultsValid(t *testing.T) {
	for _, name := range Names() {
		s, err := Default(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s: default spec invalid: %v", name, err)
		}
	}
	if _, err := Default("copying"); err == nil || !strings.Contains(err.Error(), "selective-copy, induction-heads, mqar, reversal") {
		t.Errorf("unknown task: error %v does not list the valid ones", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		spec Spec
		want string
	}{
		{Spec{Name: SelectiveCopy, Length: 20, Vocab: 16, Count: 11, Test: 1}, "more than length 20"},
		{Spec{Name: SelectiveCopy, Length: 20, Vocab: 2, Count: 1, Test: 1}, "need at least 3"},
		{Spec{Name: MQAR, Length: 64, Vocab: 10, Count: 8, Test: 1}, "too few for 8 distinct keys"},
		{Spec{Name: MQAR, Length: 16, Vocab: 256, Count: 8, Test: 1}, "need length 32"},
		{Spec{Name: InductionHeads, Length: 3, Vocab: 16, Test: 1}, "need at least 4"},
		{Spec{Name: Reversal, Length: 10, Vocab: 10, Count: 6, Test: 1}, "need length 12"},
		{Spec{Name: Reversal, Length: 8, Vocab: 10, Count: 2, Test: 64}, "too few to hold out 64"},
		{Spec{Name: Reversal, Length: 8, Vocab: 10, Count: 4, Test: 0}, "at least 1 test example"},
		{Spec{Name: "sorting", Length: 8, Test: 1}, "unknown task"},
		{Spec{Name: File, Length: 8, Test: 1}, "no path"},
		{Spec{Name: Reversal, Length: 8, Vocab: 10, Count: 4, Test: 1, Bidirectional: true}, "must be equal"},
		{Spec{Name: MQAR, Length: 64, Vocab: 64, Count: 4, Test: 1, Bidirectional: true}, "no bidirectional form"},
	}
	for _, tt := range tests {
		err := tt.spec.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want one containing %q", tt.spec, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") && !strings.Contains(tt.want, "\n") && tt.spec.Name != "sorting" {
			// each problem is one line; these specs have one problem each
			t.Errorf("%+v: error spans lines: %q", tt.spec, err)
		}
	}
}

// check verifies an example against the task's definition, computed here
// from the tokens alone.
func check(t *testing.T, s Spec, ex Example) {
	t.Helper()
	if len(ex.Tokens) != s.Length || len(ex.Targets) != s.Length {
		t.Fatalf("%s: %d tokens, %d targets, want %d", s.Name, len(ex.Tokens), len(ex.Targets), s.Length)
	}
	var want []int32 // the targets in order
	var at []int     // where they must be
	switch s.Name {
	case SelectiveCopy:
		slots := s.Length - s.Count
		for i, tok := range ex.Tokens[:slots] {
			if tok != 0 {
				want = append(want, tok)
				if tok < 1 || tok > int32(s.Vocab-2) {
					t.Fatalf("data token %d at %d outside 1…%d", tok, i, s.Vocab-2)
				}
			}
		}
		if len(want) != s.Count {
			t.Fatalf("%d data tokens, want %d", len(want), s.Count)
		}
		for i := slots; i < s.Length; i++ {
			if ex.Tokens[i] != int32(s.Vocab-1) {
				t.Fatalf("position %d: %d, want the marker %d", i, ex.Tokens[i], s.Vocab-1)
			}
			at = append(at, i)
		}
	case InductionHeads:
		sp := int32(s.Vocab)
		var specials []int
		for i, tok := range ex.Tokens {
			if tok == sp {
				specials = append(specials, i)
			}
		}
		if len(specials) != 2 || specials[1] != s.Length-2 || specials[0] >= s.Length-3 {
			t.Fatalf("special tokens at %v, want one before %d and one at %d", specials, s.Length-3, s.Length-2)
		}
		want = []int32{ex.Tokens[specials[0]+1]}
		at = []int{s.Length - 2}
		if ex.Tokens[s.Length-1] != want[0] {
			t.Fatalf("last token %d, want %d", ex.Tokens[s.Length-1], want[0])
		}
	case MQAR:
		val := map[int32]int32{}
		for i := 0; i < 2*s.Count; i += 2 {
			k, v := ex.Tokens[i], ex.Tokens[i+1]
			if k < 1 || k >= int32(s.Vocab/2) || v < int32(s.Vocab/2) || v >= int32(s.Vocab) {
				t.Fatalf("pair %d: key %d, value %d out of their halves", i/2, k, v)
			}
			if _, dup := val[k]; dup {
				t.Fatalf("key %d twice", k)
			}
			val[k] = v
		}
		for i := 2 * s.Count; i < s.Length; i++ {
			if k := ex.Tokens[i]; k != 0 && k < int32(s.Vocab/2) {
				want = append(want, val[k])
				at = append(at, i)
				if ex.Tokens[i+1] != val[k] {
					t.Fatalf("query %d at %d is followed by %d, not its value %d", k, i, ex.Tokens[i+1], val[k])
				}
			}
		}
		if len(want) != s.Count {
			t.Fatalf("%d queries, want %d", len(want), s.Count)
		}
	case Reversal:
		if s.Bidirectional {
			for i := range s.Count {
				want = append(want, ex.Tokens[s.Count-1-i])
				at = append(at, i)
			}
			break
		}
		for i := range s.Count {
			want = append(want, ex.Tokens[s.Count-1-i])
			at = append(at, s.Count+i)
		}
		if ex.Tokens[s.Count] != int32(s.Vocab) {
			t.Fatalf("no separator at %d", s.Count)
		}
	}
	var got []int32
	var gotAt []int
	for i, tg := range ex.Targets {
		if tg >= 0 {
			got = append(got, tg)
			gotAt = append(gotAt, i)
		}
	}
	if !slices.Equal(got, want) || !slices.Equal(gotAt, at) {
		t.Fatalf("%s: targets %v at %v, want %v at %v\ntokens %v", s.Name, got, gotAt, want, at, ex.Tokens)
	}
}

func smallSpecs() []Spec {
	return []Spec{
		{Name: SelectiveCopy, Length: 24, Vocab: 6, Count: 4, Test: 16, Seed: 3},
		{Name: InductionHeads, Length: 12, Vocab: 4, Test: 16, Seed: 3},
		{Name: MQAR, Length: 24, Vocab: 16, Count: 4, Test: 16, Seed: 3},
		{Name: Reversal, Length: 14, Vocab: 3, Count: 6, Test: 16, Seed: 3},
		{Name: Reversal, Length: 7, Vocab: 3, Count: 7, Test: 16, Seed: 3, Bidirectional: true},
	}
}

func TestGenerators(t *testing.T) {
	for _, s := range smallSpecs() {
		set := newSet(t, s)
		for _, ex := range set.Test {
			check(t, s, ex)
		}
		var ex Example
		var next uint64
		for range 200 {
			set.Draw(&ex, &next)
			check(t, s, ex)
		}
		for _, ex := range set.Test {
			for _, tok := range ex.Tokens {
				if tok < 0 || int(tok) >= set.Vocab() {
					t.Fatalf("%s: token %d outside vocabulary %d", s.Name, tok, set.Vocab())
				}
			}
		}
	}
}

// TestNoOverlap draws many training examples of tasks small enough that
// independent streams would repeat test examples, and finds none of them.
func TestNoOverlap(t *testing.T) {
	for _, s := range []Spec{
		{Name: Reversal, Length: 8, Vocab: 4, Count: 4, Test: 20, Seed: 1}, // 256 examples
		{Name: InductionHeads, Length: 6, Vocab: 3, Test: 10, Seed: 1},     // 3·27 = 81
		{Name: SelectiveCopy, Length: 6, Vocab: 4, Count: 2, Test: 3, Seed: 1},
	} {
		set := newSet(t, s)
		test := map[string]bool{}
		for _, ex := range set.Test {
			test[key(ex)] = true
		}
		if len(test) != s.Test {
			t.Fatalf("%s: %d distinct test examples, want %d", s.Name, len(test), s.Test)
		}
		var ex Example
		var next uint64
		seen := map[string]bool{}
		for range 5000 {
			set.Draw(&ex, &next)
			if test[key(ex)] {
				t.Fatalf("%s: training draw %d is a test example: %v", s.Name, next-1, ex.Tokens)
			}
			seen[key(ex)] = true
		}
		if len(seen) < 2 {
			t.Fatalf("%s: training stream repeats one example", s.Name)
		}
	}
}

func key(ex Example) string {
	var b strings.Builder
	for _, v := range append(slices.Clone(ex.Tokens), ex.Targets...) {
		b.WriteString(string(rune(v + 2)))
	}
	return b.String()
}

func TestDeterministic(t *testing.T) {
	for _, s := range smallSpecs() {
		a, b := newSet(t, s), newSet(t, s)
		s2 := s
		s2.Seed++
		c := newSet(t, s2)
		var ea, eb Example
		var na, nb uint64 = 5, 5 // resuming mid-stream
		for range 20 {
			a.Draw(&ea, &na)
			b.Draw(&eb, &nb)
			if !slices.Equal(ea.Tokens, eb.Tokens) || na != nb {
				t.Fatalf("%s: same seed, different training examples", s.Name)
			}
		}
		same := 0
		for i := range a.Test {
			if !slices.Equal(a.Test[i].Tokens, b.Test[i].Tokens) {
				t.Fatalf("%s: same seed, different test examples", s.Name)
			}
			if slices.Equal(a.Test[i].Tokens, c.Test[i].Tokens) {
				same++
			}
		}
		if same == len(a.Test) {
			t.Errorf("%s: another seed gives the same test set", s.Name)
		}
	}
}

func TestTrainCycles(t *testing.T) {
	s := Spec{Name: MQAR, Length: 24, Vocab: 16, Count: 4, Test: 4, Train: 3, Seed: 1}
	set := newSet(t, s)
	var first, ex Example
	var next uint64
	set.Draw(&first, &next)
	first = Example{Tokens: slices.Clone(first.Tokens)}
	for next < 3 {
		set.Draw(&ex, &next)
	}
	set.Draw(&ex, &next)
	if next == 4 && !slices.Equal(ex.Tokens, first.Tokens) {
		t.Errorf("with Train 3, draw 3 is not draw 0 again")
	}
}

func TestScore(t *testing.T) {
	// Two examples of length 2, vocabulary 3.
	exs := []Example{
		{Tokens: []int32{0, 0}, Targets: []int32{-1, 2}},
		{Tokens: []int32{0, 0}, Targets: []int32{1, 0}},
	}
	logits := []float32{
		9, 9, 9, 0, 0, 1, // ex 0: position 0 unscored; position 1 right (2)
		0, 1, 0, 1, 0, 0, // ex 1: position 0 right (1), position 1 right (0)
	}
	var s Score
	s.Add(logits, 3, exs[:1])
	s.Add(logits[6:], 3, exs[1:])
	m := s.Metrics()
	lse := math.Log(2 + math.E) // log(e^0 + e^0 + e^1)
	want := (3*lse - 3) / 3     // every scored row: lse − 1
	if m.Tokens != 3 || m.Examples != 2 || m.Accuracy != 1 || m.Exact != 1 || math.Abs(m.Loss-want) > 1e-12 {
		t.Errorf("got %+v, want 3 tokens, 2 examples, accuracy 1, exact 1, loss %v", m, want)
	}
	logits[6] = 5 // ex 1, position 0 now wrong
	var s2 Score
	s2.Add(logits, 3, exs)
	m = s2.Metrics()
	if m.Accuracy != 2.0/3 || m.Exact != 0.5 {
		t.Errorf("one token wrong: accuracy %v exact %v, want 2/3 and 1/2", m.Accuracy, m.Exact)
	}
}

// TestPoolAllHeld builds a pool of one training example that is a test
// example (found by trying seeds), which must be refused rather than hang.
func TestPoolAllHeld(t *testing.T) {
	for seed := range uint64(2000) {
		s := Spec{Name: Reversal, Length: 6, Vocab: 2, Count: 3, Test: 1, Train: 1, Seed: seed}
		s.Train = 0
		set := newSet(t, s)
		var ex Example
		rng := rand.New(rand.NewPCG(mix(seed, trainStream), 0))
		s.reversal(rng, &ex)
		if !slices.Equal(ex.Tokens, set.Test[0].Tokens) {
			continue
		}
		s.Train = 1
		if _, err := New(s, tokenizer.Byte); err == nil || !strings.Contains(err.Error(), "also a test example") {
			t.Fatalf("seed %d: a pool of one held-out example: error %v", seed, err)
		}
		return
	}
	// Each seed has a chance of 1/8: this cannot happen by luck.
	t.Fatal("no seed below 2000 makes the pool's only example a test example")
}
