package data

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// countTokenizer is a stand-in tokenizer for writing token files of a
// given vocabulary.
type countTokenizer struct{ vocab int }

func (c countTokenizer) Name() string   { return "count" }
func (c countTokenizer) VocabSize() int { return c.vocab }
func (c countTokenizer) Encode(context.Context, []int32, []byte) ([]int32, error) {
	panic("not used")
}
func (c countTokenizer) Decode(dst []byte, tokens []int32) ([]byte, error) {
	panic("not used")
}

// countTokens writes the stream 0, 1, 2, ... n-1 (mod vocab) to a token
// file and opens it.
func countTokens(t testing.TB, n, vocab int) *Tokens {
	t.Helper()
	tok := countTokenizer{vocab}
	path := filepath.Join(t.TempDir(), "count")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newTokenWriter(f, tok)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i % vocab)
	}
	if err := w.write(ids); err != nil {
		t.Fatal(err)
	}
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	tk, err := openTokens(path, tok, "count tokens")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tk.Close() })
	return tk
}

// TestCopy checks every token width: 1, 2 and 4 bytes.
func TestCopy(t *testing.T) {
	for _, vocab := range []int{256, 50257, 1 << 20} {
		tk := countTokens(t, 70000, vocab)
		got := make([]int32, 70000)
		if err := tk.Copy(got, 0); err != nil {
			t.Fatal(err)
		}
		for i, id := range got {
			if id != int32(i%vocab) {
				t.Fatalf("vocabulary %d: token %d is %d, want %d", vocab, i, id, i%vocab)
			}
		}
		part := make([]int32, 3)
		if err := tk.Copy(part, 69997); err != nil || !slices.Equal(part, []int32{int32(69997 % vocab), int32(69998 % vocab), int32(69999 % vocab)}) {
			t.Errorf("vocabulary %d: last 3 tokens %v, %v", vocab, part, err)
		}
	}
}

// window checks that row i of b is N+1 consecutive tokens of the count
// stream 0..n-1 and returns its start.
func window(t *testing.T, b *Batch, i, n int) int {
	t.Helper()
	row := b.Tokens[i*(b.N+1) : (i+1)*(b.N+1)]
	start := int(row[0])
	if start+b.N+1 > n {
		t.Fatalf("window %d starts at %d: past the end of %d tokens", i, start, n)
	}
	for j, id := range row {
		if int(id) != start+j {
			t.Fatalf("window %d = %v, not consecutive tokens", i, row)
		}
	}
	if !slices.Equal(b.Inputs(i), row[:b.N]) || !slices.Equal(b.Targets(i), row[1:]) {
		t.Fatalf("window %d: inputs %v, targets %v", i, b.Inputs(i), b.Targets(i))
	}
	return start
}

func TestRandom(t *testing.T) {
	const n, batch, seqLen = 1000, 8, 9
	tk := countTokens(t, n, 50257)
	draw := func(b *Batcher, count int) [][]int32 {
		var out [][]int32
		var bt Batch
		for range count {
			if err := b.Next(&bt); err != nil {
				t.Fatal(err)
			}
			if bt.B != batch || bt.N != seqLen || len(bt.Tokens) != batch*(seqLen+1) {
				t.Fatalf("batch %d×%d with %d tokens", bt.B, bt.N, len(bt.Tokens))
			}
			out = append(out, slices.Clone(bt.Tokens))
		}
		return out
	}
	newRandom := func(seed uint64) *Batcher {
		b, err := NewRandom(tk, batch, seqLen, seed)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	a, b, other := draw(newRandom(1), 20), draw(newRandom(1), 20), draw(newRandom(2), 20)
	if !slices.EqualFunc(a, b, slices.Equal) {
		t.Error("the same seed gives different batches")
	}
	if slices.EqualFunc(a, other, slices.Equal) {
		t.Error("different seeds give the same batches")
	}

	// Windows lie inside the stream, and their starts cover it evenly.
	counts := make([]int, 10)
	var bt Batch
	r := newRandom(3)
	lo, hi := n, 0
	for range 2000 {
		if err := r.Next(&bt); err != nil {
			t.Fatal(err)
		}
		for i := range bt.B {
			s := window(t, &bt, i, n)
			lo, hi = min(lo, s), max(hi, s)
			counts[s*len(counts)/(n-seqLen)]++
		}
	}
	if lo != 0 || hi != n-seqLen-1 {
		t.Errorf("window starts in [%d, %d], want [0, %d]", lo, hi, n-seqLen-1)
	}
	for i, c := range counts { // 1600 expected, sd 38
		if c < 1400 || c > 1800 {
			t.Errorf("starts in tenth %d of the stream: %d of 16000", i, c)
		}
	}
}

func TestRandomResume(t *testing.T) {
	tk := countTokens(t, 5000, 50257)
	b, err := NewRandom(tk, 4, 16, 42)
	if err != nil {
		t.Fatal(err)
	}
	var bt Batch
	for range 3 {
		if err := b.Next(&bt); err != nil {
			t.Fatal(err)
		}
	}
	state, err := b.State()
	if err != nil {
		t.Fatal(err)
	}
	draw := func(b *Batcher) [][]int32 {
		var out [][]int32
		for range 5 {
			if err := b.Next(&bt); err != nil {
				t.Fatal(err)
			}
			out = append(out, slices.Clone(bt.Tokens))
		}
		return out
	}
	want := draw(b)
	if err := b.SetState(state); err != nil {
		t.Fatal(err)
	}
	if got := draw(b); !slices.EqualFunc(got, want, slices.Equal) {
		t.Error("after SetState, the batches differ")
	}
	// A new process: another Batcher, any seed, restored.
	fresh, err := NewRandom(tk, 4, 16, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.SetState(state); err != nil {
		t.Fatal(err)
	}
	if got := draw(fresh); !slices.EqualFunc(got, want, slices.Equal) {
		t.Error("a new Batcher restored to the state gives other batches")
	}
	for _, bad := range [][]byte{nil, []byte("seq:\x00\x00\x00\x00\x00\x00\x00\x00"), []byte("pcg:short")} {
		if err := fresh.SetState(bad); err == nil {
			t.Errorf("SetState(%q) succeeded", bad)
		}
	}
}

func TestSequential(t *testing.T) {
	for _, tc := range []struct {
		n, batch, seqLen, maxBatches int
		wantBatches, lastRows        int
	}{
		// 100 tokens, windows of 10 every 9 tokens: 11 windows (the
		// 12th would need token 108).
		{n: 100, batch: 4, seqLen: 9, wantBatches: 3, lastRows: 3},
		{n: 100, batch: 11, seqLen: 9, wantBatches: 1, lastRows: 11},
		{n: 100, batch: 4, seqLen: 9, maxBatches: 2, wantBatches: 2, lastRows: 4},
		{n: 100, batch: 4, seqLen: 9, maxBatches: 99, wantBatches: 3, lastRows: 3},
		{n: 10, batch: 2, seqLen: 9, wantBatches: 1, lastRows: 1},
		{n: 101, batch: 1, seqLen: 100, wantBatches: 1, lastRows: 1},
	} {
		tk := countTokens(t, tc.n, 50257)
		b, err := NewSequential(tk, tc.batch, tc.seqLen, tc.maxBatches)
		if err != nil {
			t.Fatal(err)
		}
		if b.Batches() != tc.wantBatches {
			t.Errorf("%+v: %d batches", tc, b.Batches())
		}
		var targets []int32
		var bt Batch
		var starts []int
		rows := 0
		for pass := range 2 {
			for {
				err := b.Next(&bt)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				rows = bt.B
				for i := range bt.B {
					if pass == 0 {
						starts = append(starts, window(t, &bt, i, tc.n))
						targets = append(targets, bt.Targets(i)...)
					}
				}
			}
			if err := b.Next(&bt); err != io.EOF {
				t.Errorf("%+v: Next after the end: %v", tc, err)
			}
			b.Reset()
		}
		if rows != tc.lastRows {
			t.Errorf("%+v: last batch has %d rows, want %d", tc, rows, tc.lastRows)
		}
		// Windows follow each other, each token a target once.
		for i, s := range starts {
			if s != i*tc.seqLen {
				t.Fatalf("%+v: window %d starts at %d", tc, i, s)
			}
		}
		if tc.maxBatches == 0 {
			for i, id := range targets {
				if int(id) != i+1 {
					t.Fatalf("%+v: target %d is %d", tc, i, id)
				}
			}
			if uncovered := tc.n - 1 - len(targets); uncovered < 0 || uncovered >= tc.seqLen {
				t.Errorf("%+v: %d targets of %d tokens", tc, len(targets), tc.n)
			}
		}
	}
}

func TestSequentialResume(t *testing.T) {
	tk := countTokens(t, 1000, 50257)
	b, err := NewSequential(tk, 3, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bt Batch
	b.Next(&bt)
	state, err := b.State()
	if err != nil {
		t.Fatal(err)
	}
	b.Next(&bt)
	want := slices.Clone(bt.Tokens)
	b.Reset()
	if err := b.SetState(state); err != nil {
		t.Fatal(err)
	}
	b.Next(&bt)
	if !slices.Equal(bt.Tokens, want) {
		t.Error("after SetState, the next batch differs")
	}
	r, _ := NewRandom(tk, 3, 10, 1)
	rs, _ := r.State()
	if err := b.SetState(rs); err == nil {
		t.Error("a sequential batcher accepted a random one's state")
	}
}

func TestBatcherErrors(t *testing.T) {
	tk := countTokens(t, 10, 50257)
	for _, tc := range []struct {
		batch, seqLen int
		want          []string
	}{
		{1, 10, []string{"count tokens has 10 tokens", "sequence length 10 needs 11", "shorter sequence"}},
		{1, 0, []string{"sequence length 0"}},
		{0, 5, []string{"batch size 0"}},
	} {
		_, err1 := NewRandom(tk, tc.batch, tc.seqLen, 1)
		_, err2 := NewSequential(tk, tc.batch, tc.seqLen, 0)
		for _, err := range []error{err1, err2} {
			if err == nil {
				t.Errorf("batch %d, length %d: no error", tc.batch, tc.seqLen)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		}
	}
	if _, err := NewRandom(tk, 1, 9, 1); err != nil {
		t.Errorf("10 tokens, length 9: %v", err)
	}
}
