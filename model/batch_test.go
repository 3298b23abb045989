package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/nn"
)

// stepAll feeds each sequence its tokens in the given chunk sizes (cycled)
// through b, all sequences together while they have tokens left, and
// returns the logits after every chunk of every sequence: out[i][p] holds
// the logits predicting the token after position p when a chunk ended
// there, nil otherwise.
func stepAll(t *testing.T, b *Batch, seqs []*Sequence, tokens [][]int32, chunks [][]int, V int) [][][]float32 {
	t.Helper()
	out := make([][][]float32, len(seqs))
	at, step := make([]int, len(seqs)), make([]int, len(seqs))
	for i := range seqs {
		out[i] = make([][]float32, len(tokens[i]))
	}
	for {
		var ss []*Sequence
		var ts [][]int32
		var idx []int
		for i, s := range seqs {
			if at[i] == len(tokens[i]) {
				continue
			}
			c := min(chunks[i][step[i]%len(chunks[i])], len(tokens[i])-at[i])
			ss, ts, idx = append(ss, s), append(ts, tokens[i][at[i]:at[i]+c]), append(idx, i)
		}
		if len(ss) == 0 {
			return out
		}
		logits, err := b.Step(ss, ts)
		if err != nil {
			t.Fatal(err)
		}
		for j, i := range idx {
			at[i] += len(ts[j])
			step[i]++
			out[i][at[i]-1] = append([]float32(nil), logits.Data[j*V:(j+1)*V]...)
		}
	}
}

// TestBatchMatchesForward steps sequences of different lengths together,
// in chunks of different sizes, and compares their logits with Forward
// over each whole sequence.
func TestBatchMatchesForward(t *testing.T) {
	for _, c := range testCases() {
		t.Run(c.name, func(t *testing.T) {
			m := mustNew(t, c.cfg)
			perturb(m, 3)
			V := c.cfg.Vocab
			lengths := []int{13, 7, 11}
			chunks := [][]int{{1}, {3, 1}, {5, 2, 1}}
			rng := rand.New(rand.NewPCG(9, 9))
			var seqs []*Sequence
			var tokens [][]int32
			for _, n := range lengths {
				s, err := m.NewSequence()
				if err != nil {
					t.Fatal(err)
				}
				seqs, tokens = append(seqs, s), append(tokens, randomTokens(rng, n, V))
			}
			got := stepAll(t, m.NewBatch(), seqs, tokens, chunks, V)
			for i, toks := range tokens {
				if seqs[i].Len() != len(toks) {
					t.Errorf("sequence %d: Len() = %d after %d tokens", i, seqs[i].Len(), len(toks))
				}
				want := m.Forward(toks, 1, len(toks))
				for p, g := range got[i] {
					if g == nil {
						continue
					}
					w := want.Data[p*V : (p+1)*V]
					if d := relDiff(g, w); d > decodeTol {
						t.Errorf("sequence %d, position %d: logits differ from Forward by %.3g of the largest, want ≤ %g", i, p, d, decodeTol)
					}
				}
			}
		})
	}
}

func relDiff(a, b []float32) float64 {
	var scale, w float64
	for _, x := range b {
		scale = math.Max(scale, math.Abs(float64(x)))
	}
	for i := range a {
		w = math.Max(w, math.Abs(float64(a[i])-float64(b[i])))
	}
	return w / scale
}

// TestBatchInvariance checks that a sequence's logits have the same bits
// alone and stepped together with any number of other sequences, at
// other positions and in other chunks, enough of them that the rows of a
// step span several matrix products.
func TestBatchInvariance(t *testing.T) {
	// Wide enough for products of many rows at a time, and a GLU whose
	// output sums over more than one k block of the packed products.
	wide := func(c Config) Config { c.Dim, c.Hidden, c.Vocab = 64, 288, 40; return c }
	cases := []struct {
		name string
		cfg  Config
		prec nn.Precision
	}{
		{"polysketch", tiny("polysketch:learned"), nn.FP32},
		{"flash", tiny("flash"), nn.FP32},
		{"polysketch/wide", wide(tiny("polysketch:learned")), nn.FP32}, // products of many rows at a time
		{"flash/wide", wide(tiny("flash")), nn.FP32},
		{"polysketch/bf16", tiny("polysketch:learned"), nn.BF16},
		{"polysketch/wide/bf16", wide(tiny("polysketch:learned")), nn.BF16},
		{"flash/wide/bf16", wide(tiny("flash")), nn.BF16},
	}
	for _, a := range architectures() { // imported models' architectures, grouped heads and all
		cases = append(cases, struct {
			name string
			cfg  Config
			prec nn.Precision
		}{a.name, a.cfg, nn.FP32}, struct {
			name string
			cfg  Config
			prec nn.Precision
		}{a.name + "/wide/bf16", wide(a.cfg), nn.BF16})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			m := mustNew(t, c)
			perturb(m, 4)
			if tc.prec == nn.BF16 { // as serve --precision bf16 runs it
				m.SetPrecision(nn.BF16)
				if err := m.ReleaseFP32(); err != nil {
					t.Fatal(err)
				}
			}
			V := c.Vocab
			rng := rand.New(rand.NewPCG(2, 2))
			mine := randomTokens(rng, 20, V)
			myChunks := []int{6, 1}
			run := func(others int) [][]float32 {
				seqs := []*Sequence{}
				tokens := [][]int32{mine}
				chunks := [][]int{myChunks}
				for j := 0; j <= others; j++ {
					s, err := m.NewSequence()
					if err != nil {
						t.Fatal(err)
					}
					seqs = append(seqs, s)
					if j > 0 {
						tokens = append(tokens, randomTokens(rng, 5+j%17, V))
						chunks = append(chunks, []int{j%9 + 1, 1})
					}
				}
				return stepAll(t, m.NewBatch(), seqs, tokens, chunks, V)[0]
			}
			alone := run(0)
			for _, others := range []int{1, 5, 40} {
				got := run(others)
				for p := range alone {
					for j := range alone[p] {
						if math.Float32bits(got[p][j]) != math.Float32bits(alone[p][j]) {
							t.Fatalf("with %d other sequences: logit %d after position %d is %v, alone %v", others, j, p, got[p][j], alone[p][j])
						}
					}
				}
			}
		})
	}
}

// TestBatchThreads checks that decoding steps give the same bits for
// every GOMAXPROCS of parallel.TestThreads: sequences of prompt chunks
// and single tokens stepped together, their attention on the pool's
// goroutines, their products split among them.
func TestBatchThreads(t *testing.T) {
	wide := func(c Config) Config { c.Dim, c.Hidden, c.Vocab = 64, 288, 300; return c }
	for _, tc := range []struct {
		name string
		cfg  Config
		prec nn.Precision
	}{
		{"polysketch", wide(tiny("polysketch:learned")), nn.FP32},
		{"flash", wide(tiny("flash")), nn.FP32},
		{"polysketch/bf16", wide(tiny("polysketch:learned")), nn.BF16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustNew(t, tc.cfg)
			perturb(m, 4)
			m.SetPrecision(tc.prec)
			V := tc.cfg.Vocab
			rng := rand.New(rand.NewPCG(3, 3))
			var tokens [][]int32
			var chunks [][]int
			for j := range 6 {
				tokens = append(tokens, randomTokens(rng, 9+j, V))
				chunks = append(chunks, []int{j%4 + 1, 1})
			}
			run := func(procs int) (out [][][]float32) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				seqs := make([]*Sequence, len(tokens))
				for i := range seqs {
					s, err := m.NewSequence()
					if err != nil {
						t.Fatal(err)
					}
					seqs[i] = s
				}
				return stepAll(t, m.NewBatch(), seqs, tokens, chunks, V)
			}
			want := run(1)
			for _, procs := range parallel.TestThreads[1:] {
				got := run(procs)
				for i := range want {
					for p := range want[i] {
						for j := range want[i][p] {
							if math.Float32bits(got[i][p][j]) != math.Float32bits(want[i][p][j]) {
								t.Fatalf("GOMAXPROCS=%d: sequence %d, logit %d after position %d is %v, with 1 thread %v", procs, i, j, p, got[i][p][j], want[i][p][j])
							}
						}
					}
				}
			}
		})
	}
}

// TestDecodeThreads checks that one sequence decoding alone, whose heads
// a step spreads over the pool (one goroutine per 4k floats of state or
// cache), gives the same bits for every GOMAXPROCS of
// parallel.TestThreads: the default model's four heads, and flash's
// cache past 32 positions.
func TestDecodeThreads(t *testing.T) {
	for _, kind := range []string{"polysketch", "flash"} {
		t.Run(kind, func(t *testing.T) {
			m := mustNew(t, configFor(kind))
			perturb(m, 5)
			rng := rand.New(rand.NewPCG(4, 4))
			tokens := randomTokens(rng, 48, m.Config().Vocab)
			run := func(procs int) [][]float32 {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				s, err := m.NewSequence()
				if err != nil {
					t.Fatal(err)
				}
				return stepAll(t, m.NewBatch(), []*Sequence{s}, [][]int32{tokens}, [][]int{{1}}, m.Config().Vocab)[0]
			}
			want := run(1)
			for _, procs := range parallel.TestThreads[1:] {
				got := run(procs)
				for p := range want {
					for j := range want[p] {
						if math.Float32bits(got[p][j]) != math.Float32bits(want[p][j]) {
							t.Fatalf("GOMAXPROCS=%d: logit %d after position %d is %v, with 1 thread %v", procs, j, p, got[p][j], want[p][j])
						}
					}
				}
			}
		})
	}
}

func TestBatchErrors(t *testing.T) {
	c := tiny("flash")
	m := mustNew(t, c)
	other := mustNew(t, tiny("polysketch"))
	other.cfg.Layers++ // a model with another number of layers
	newSeq := func() *Sequence {
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s1 := newSeq()
	foreign := &Sequence{}
	long := make([]int32, c.Context+1)
	for _, tc := range []struct {
		name   string
		seqs   []*Sequence
		tokens [][]int32
		want   string
	}{
		{"none", nil, nil, "no sequences"},
		{"count", []*Sequence{s1}, [][]int32{{1}, {2}}, "2 chunks of tokens for 1 sequences"},
		{"empty", []*Sequence{s1}, [][]int32{{}}, "no tokens for sequence 0"},
		{"vocab", []*Sequence{s1}, [][]int32{{int32(c.Vocab)}}, "outside the vocabulary"},
		{"negative", []*Sequence{s1}, [][]int32{{-1}}, "outside the vocabulary"},
		{"twice", []*Sequence{s1, s1}, [][]int32{{1}, {2}}, "listed twice"},
		{"foreign", []*Sequence{foreign}, [][]int32{{1}}, "not a sequence of this model"},
		{"limit", []*Sequence{s1}, [][]int32{long}, "pass the context length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := m.NewBatch()
			_, err := b.Step(tc.seqs, tc.tokens)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Step: %v, want an error containing %q", err, tc.want)
			}
			if s1.Len() != 0 {
				t.Fatalf("a failed Step consumed positions: Len() = %d", s1.Len())
			}
			// The sequence still works after the failure.
			if _, err := b.Step([]*Sequence{s1}, [][]int32{{1}}); err != nil {
				t.Fatalf("Step after the failure: %v", err)
			}
			s1.Reset()
		})
	}
}

// ExampleBatch decodes two sequences together, one joining after the
// other has started: a Batch steps any set of Sequences.
func ExampleBatch() {
	m, err := New(DefaultConfig())
	if err != nil {
		panic(err)
	}
	b := m.NewBatch()
	first, _ := m.NewSequence()
	second, _ := m.NewSequence()
	prompt := []int32{'f', 'u', 'n', 'c'}
	if _, err := b.Step([]*Sequence{first}, [][]int32{prompt}); err != nil {
		panic(err)
	}
	logits, err := b.Step([]*Sequence{first, second}, [][]int32{{' '}, prompt})
	if err != nil {
		panic(err)
	}
	fmt.Println(logits.Shape, first.Len(), second.Len())
	// Output: [2 256] 5 4
}

// BenchmarkBatchStep times one decoding step of S sequences of
// DefaultConfig (polysketch) stepped together, at positions near 64,
// reporting generated tokens per second: what a server's step costs.
func BenchmarkBatchStep(b *testing.B) { batchStepBench(b, nn.FP32) }

// BenchmarkBatchStepBF16 is BenchmarkBatchStep with the weights in bf16
// alone, as serve --precision bf16 holds them.
//
//	go test -run '^$' -bench 'BatchStep(BF16)?/S=(1|16)$' ./model
func BenchmarkBatchStepBF16(b *testing.B) { batchStepBench(b, nn.BF16) }

func batchStepBench(b *testing.B, p nn.Precision) {
	for _, S := range []int{1, 2, 4, 16, 32} {
		b.Run(fmt.Sprintf("S=%d", S), func(b *testing.B) {
			m := mustNew(b, DefaultConfig())
			if p == nn.BF16 {
				m.SetPrecision(p)
				if err := m.ReleaseFP32(); err != nil {
					b.Fatal(err)
				}
			}
			batch := m.NewBatch()
			seqs := make([]*Sequence, S)
			toks := make([][]int32, S)
			for i := range seqs {
				s, err := m.NewSequence()
				if err != nil {
					b.Fatal(err)
				}
				seqs[i], toks[i] = s, []int32{int32(i)}
			}
			step := func() {
				if _, err := batch.Step(seqs, toks); err != nil {
					b.Fatal(err)
				}
			}
			for range 64 {
				step()
			}
			b.ResetTimer()
			for b.Loop() {
				step()
			}
			b.ReportMetric(float64(b.N*S)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkBatchPosition times decoding steps of S polysketch sequences
// (DefaultConfig, blocks of 64) stepped together at positions
// [pos, pos+32): the cost is the same at every position past the first
// block; inside the first block there is no prefix state to read yet, so
// those steps cost less.
func BenchmarkBatchPosition(b *testing.B) {
	for _, S := range []int{1, 8} {
		for _, pos := range []int{0, 64, 1024, 4096} {
			b.Run(fmt.Sprintf("S=%d/pos=%d", S, pos), func(b *testing.B) {
				m := mustNew(b, DefaultConfig())
				batch := m.NewBatch()
				seqs := make([]*Sequence, S)
				for i := range seqs {
					s, err := m.NewSequence()
					if err != nil {
						b.Fatal(err)
					}
					seqs[i] = s
				}
				prompt := make([]int32, 256)
				chunks, toks := make([][]int32, S), make([][]int32, S)
				for i := range toks {
					toks[i] = []int32{1}
				}
				seek := func() {
					for _, s := range seqs {
						s.Reset()
					}
					for seqs[0].Len() < pos {
						for i := range chunks {
							chunks[i] = prompt[:min(256, pos-seqs[0].Len())]
						}
						if _, err := batch.Step(seqs, chunks); err != nil {
							b.Fatal(err)
						}
					}
				}
				seek()
				b.ResetTimer()
				for b.Loop() {
					if seqs[0].Len() == pos+32 {
						b.StopTimer()
						seek()
						b.StartTimer()
					}
					if _, err := batch.Step(seqs, toks); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*S)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

// TestStepEvery steps sequences in chunks, some asking for the logits
// after every token, and checks those rows against Forward over the
// whole sequence, each sequence's last row bit for bit against Step's
// (but with Gather), and that a sequence not asking gets its one row.
func TestStepEvery(t *testing.T) {
	for _, c := range testCases() {
		for _, gather := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/gather=%v", c.name, gather), func(t *testing.T) { stepEvery(t, c.cfg, gather) })
		}
	}
	m := mustNew(t, tiny("polysketch"))
	s, _ := m.NewSequence()
	if _, err := m.NewBatch().StepEvery([]*Sequence{s}, [][]int32{{1}}, nil); err == nil {
		t.Error("StepEvery with no flags: no error")
	}
}

func stepEvery(t *testing.T, cfg Config, gather bool) {
	m := mustNew(t, cfg)
	perturb(m, 4)
	V := cfg.Vocab
	rng := rand.New(rand.NewPCG(4, 4))
	lengths := []int{12, 9, 10}
	every := []bool{true, false, true}
	chunks := []int{5, 4, 1} // the last chunks: 2, 1 and 0 (done) tokens
	var tokens [][]int32
	var seqs, twins []*Sequence
	for _, n := range lengths {
		tokens = append(tokens, randomTokens(rng, n, V))
		for _, ss := range []*[]*Sequence{&seqs, &twins} {
			s, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			*ss = append(*ss, s)
		}
	}
	b, twin := m.NewBatch(), m.NewBatch()
	b.Gather = gather
	got := make([][][]float32, len(seqs))
	for i, n := range lengths {
		got[i] = make([][]float32, n)
	}
	for step := 0; ; step++ {
		var ss, tw []*Sequence
		var ts [][]int32
		var ev []bool
		var idx []int
		for i, s := range seqs {
			at := s.Len()
			if at == lengths[i] {
				continue
			}
			c := min(chunks[step%len(chunks)], lengths[i]-at)
			ss, tw, ts, ev, idx = append(ss, s), append(tw, twins[i]), append(ts, tokens[i][at:at+c]), append(ev, every[i]), append(idx, i)
		}
		if len(ss) == 0 {
			break
		}
		logits, err := b.StepEvery(ss, ts, ev)
		if err != nil {
			t.Fatal(err)
		}
		last, err := twin.Step(tw, ts)
		if err != nil {
			t.Fatal(err)
		}
		r := 0
		for j, i := range idx {
			n := 1
			if ev[j] {
				n = len(ts[j])
			}
			at := ss[j].Len() - n
			for k := range n {
				got[i][at+k] = append([]float32(nil), logits.Data[(r+k)*V:(r+k+1)*V]...)
			}
			r += n
			if g, w := got[i][ss[j].Len()-1], last.Data[j*V:(j+1)*V]; !gather && !slices.Equal(g, w) {
				t.Errorf("sequence %d, position %d: StepEvery's last row differs from Step's", i, ss[j].Len()-1)
			}
		}
		if r != logits.Shape[0] {
			t.Fatalf("step %d: %d rows of logits, want %d", step, logits.Shape[0], r)
		}
	}
	for i, toks := range tokens {
		want := m.Forward(toks, 1, len(toks))
		for p, g := range got[i] {
			if g == nil {
				if every[i] {
					t.Errorf("sequence %d, position %d: no logits", i, p)
				}
				continue
			}
			if d := relDiff(g, want.Data[p*V:(p+1)*V]); d > decodeTol {
				t.Errorf("sequence %d, position %d: logits differ from Forward by %.3g of the largest, want ≤ %g", i, p, d, decodeTol)
			}
		}
	}
}
