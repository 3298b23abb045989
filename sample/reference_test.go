package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// reference is the sampler before partial selection, kept as the
// specification of the top-k and top-p draws: every token sorted, most
// likely first (ties by id), cut to the top k, weighted, cut to the
// nucleus, and drawn along that order.
func reference(s *Sampler, logits []float32) int32 {
	if s.Temperature == 0 {
		return referenceSorted(s, logits, nil) // an argmax: no order needed
	}
	return referenceSorted(s, logits, sorted(logits))
}

// sorted returns the token ids of logits, most likely first, ties by id.
func sorted(logits []float32) []int {
	order := make([]int, len(logits))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return a - b
	})
	return order
}

// referenceSorted is reference with the ids of logits already sorted.
func referenceSorted(s *Sampler, logits []float32, order []int) int32 {
	if s.Temperature == 0 {
		best := 0
		for i, l := range logits {
			if l > logits[best] {
				best = i
			}
		}
		return int32(best)
	}
	if s.TopK > 0 && s.TopK < len(order) {
		order = order[:s.TopK]
	}
	top := float64(logits[order[0]])
	var probs []float64
	var sum float64
	for _, id := range order {
		p := math.Exp((float64(logits[id]) - top) / s.Temperature)
		probs = append(probs, p)
		sum += p
	}
	keep, acc := len(probs), 0.0
	for i, p := range probs {
		acc += p / sum
		if acc >= s.TopP {
			keep = i + 1
			break
		}
	}
	order, probs = order[:keep], probs[:keep]
	sum = 0
	for _, p := range probs {
		sum += p
	}
	u := s.Rand.Float64() * sum
	for i, p := range probs {
		if u < p {
			return int32(order[i])
		}
		u -= p
	}
	return int32(order[len(order)-1])
}

// testLogits returns logit vectors of several sizes and shapes: flat and
// peaked normal logits, logits with many ties, and one dominant token.
func testLogits() map[string][]float32 {
	rng := rand.New(rand.NewPCG(9, 9))
	out := map[string][]float32{}
	for _, V := range []int{1, 7, 300, 5000} {
		for _, shape := range []string{"normal", "peaked", "ties", "spike"} {
			l := make([]float32, V)
			for i := range l {
				switch shape {
				case "normal":
					l[i] = float32(rng.NormFloat64())
				case "peaked":
					l[i] = float32(4 * rng.NormFloat64())
				case "ties":
					l[i] = float32(rng.IntN(4))
				case "spike":
					l[i] = float32(rng.NormFloat64())
				}
			}
			if shape == "spike" {
				l[rng.IntN(V)] = 30
			}
			out[fmt.Sprintf("V=%d/%s", V, shape)] = l
		}
	}
	return out
}

// TestMatchesReference: greedy, top-k and top-p draw the same token as the
// reference for the same seed and logits, draw after draw.
func TestMatchesReference(t *testing.T) {
	var settings []Sampler
	for _, temp := range []float64{0.5, 1.7} {
		for _, k := range []int{0, 1, 5, 40, 299, 1 << 40} {
			for _, p := range []float64{0.1, 0.9, 0.99, 1} {
				if (k == 0 || k >= 5000) && p == 1 {
					continue // plain sampling: drawn in id order, see TestPlain
				}
				settings = append(settings, Sampler{Settings: Settings{Temperature: temp, TopK: k, TopP: p}})
			}
		}
	}
	settings = append(settings, Sampler{Settings: Settings{Temperature: 0, TopP: 1}})
	for name, logits := range testLogits() {
		order := sorted(logits)
		for _, set := range settings {
			if (set.TopK == 0 || set.TopK >= len(logits)) && set.TopP == 1 && set.Temperature != 0 {
				continue
			}
			s, ref := set, set
			s.Rand, ref.Rand = rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(1, 2))
			for i := range 10 {
				if got, want := draw(t, &s, logits), referenceSorted(&ref, logits, order); got != want {
					t.Fatalf("%s, T=%v k=%d p=%v: draw %d is token %d, the reference's %d", name, set.Temperature, set.TopK, set.TopP, i, got, want)
				}
			}
		}
	}
}

// TestNucleusFallback: should the selection of the nucleus's candidates
// fall short (forced here by a negative margin), the draws are still the
// reference's.
func TestNucleusFallback(t *testing.T) {
	defer func(m float64) { nucleusMargin = m }(nucleusMargin)
	nucleusMargin = -0.5
	for name, logits := range testLogits() {
		order := sorted(logits)
		for _, p := range []float64{0.3, 0.9} {
			s := Sampler{Settings: Settings{Temperature: 1, TopP: p}, Rand: rand.New(rand.NewPCG(3, 4))}
			ref := s
			ref.Rand = rand.New(rand.NewPCG(3, 4))
			for i := range 5 {
				if got, want := draw(t, &s, logits), referenceSorted(&ref, logits, order); got != want {
					t.Fatalf("%s, p=%v: draw %d is token %d, the reference's %d", name, p, i, got, want)
				}
			}
		}
	}
}

// TestExtremeTemperatures: a temperature so small that 1/T overflows
// float32 takes the most likely token, one so large draws uniformly, as
// the reference does.
func TestExtremeTemperatures(t *testing.T) {
	logits := []float32{0.5, -3, 2.25, 2.2, 1e6, -1e6, 7}
	for _, temp := range []float64{1e-300, 1e-40, 1e-3} {
		for _, p := range []float64{1, 0.9} {
			s := Sampler{Settings: Settings{Temperature: temp, TopP: p}, Rand: rand.New(rand.NewPCG(1, 1))}
			for range 10 {
				if got := draw(t, &s, logits); got != 4 {
					t.Fatalf("T=%v, p=%v: token %d, want 4, the most likely", temp, p, got)
				}
			}
		}
	}
	s := Sampler{Settings: Settings{Temperature: 1e300, TopP: 1}, Rand: rand.New(rand.NewPCG(1, 1))}
	seen := map[int32]bool{}
	for range 1000 {
		seen[draw(t, &s, logits)] = true
	}
	if len(seen) != len(logits) {
		t.Errorf("T=1e300: drew %d distinct tokens of %d, want all (uniform)", len(seen), len(logits))
	}
}

// TestWideNucleus: nuclei of tens of thousands of tokens (nearly flat
// logits, as an untrained model's, over GPT-2's vocabulary) are drawn
// from the float32 weights without a sort, and still give the
// reference's tokens.
func TestWideNucleus(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, scale := range []float64{0.05, 0.5} {
		logits := make([]float32, 50257)
		for i := range logits {
			logits[i] = float32(scale * rng.NormFloat64())
		}
		order := sorted(logits)
		for _, p := range []float64{0.5, 0.95} {
			s := Sampler{Settings: Settings{Temperature: 1, TopP: p}, Rand: rand.New(rand.NewPCG(5, 6))}
			ref := s
			ref.Rand = rand.New(rand.NewPCG(5, 6))
			for i := range 40 {
				if got, want := draw(t, &s, logits), referenceSorted(&ref, logits, order); got != want {
					t.Fatalf("scale %v, p=%v: draw %d is token %d, the reference's %d", scale, p, i, got, want)
				}
			}
		}
	}
}

// TestCrossMisses: when the range of logits that the sample suggests
// misses the token sought (forced here: a range above it, below it, empty,
// or reversed), the wider ranges that follow still give the reference's
// tokens, for nuclei wide and narrow among many candidates.
func TestCrossMisses(t *testing.T) {
	defer func() { missBounds = nil }()
	inf := float32(math.Inf(1))
	misses := map[string]func(lo, hi float32) (float32, float32){
		"above":    func(lo, hi float32) (float32, float32) { return 3, inf },
		"below":    func(lo, hi float32) (float32, float32) { return -inf, -3 },
		"empty":    func(lo, hi float32) (float32, float32) { return 0.1, 0.1 },
		"reversed": func(lo, hi float32) (float32, float32) { return hi, lo },
		"all":      func(lo, hi float32) (float32, float32) { return -inf, inf },
	}
	rng := rand.New(rand.NewPCG(13, 14))
	logits := make([]float32, 50257)
	for i := range logits {
		logits[i] = float32(0.5 * rng.NormFloat64())
	}
	order := sorted(logits)
	for name, miss := range misses {
		missBounds = miss
		// T=1: a nucleus of tens of thousands; T=0.15: of about a thousand
		// among more than fewCandidates candidates.
		for _, temp := range []float64{1, 0.15} {
			s := Sampler{Settings: Settings{Temperature: temp, TopP: 0.9}, Rand: rand.New(rand.NewPCG(5, 6))}
			ref := s
			ref.Rand = rand.New(rand.NewPCG(5, 6))
			for i := range 10 {
				if got, want := draw(t, &s, logits), referenceSorted(&ref, logits, order); got != want {
					t.Fatalf("%s, T=%v: draw %d is token %d, the reference's %d", name, temp, i, got, want)
				}
			}
		}
	}
}

// TestWideNucleusMasked: a flat distribution with tokens banned by
// LogitBias (their logits -Inf, weight 0), whose nucleus may reach them
// when p is 1 or nearly, draws the reference's tokens (on logits masked
// by hand) and never a banned one.
func TestWideNucleusMasked(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	logits := make([]float32, 50257)
	masked := make([]float32, len(logits))
	bans := map[int32]float64{}
	for i := range logits {
		logits[i] = float32(0.3 * rng.NormFloat64())
		masked[i] = logits[i]
		if i%7 == 0 {
			masked[i] = float32(math.Inf(-1))
			bans[int32(i)] = -MaxBias
		}
	}
	order := sorted(masked)
	for _, p := range []float64{0.3, 0.999999} {
		s := Sampler{Settings: Settings{Temperature: 1, TopP: p, LogitBias: bans}, Rand: rand.New(rand.NewPCG(7, 8))}
		ref := s
		ref.Rand = rand.New(rand.NewPCG(7, 8))
		for i := range 40 {
			got, want := draw(t, &s, logits), referenceSorted(&ref, masked, order)
			if got != want || bans[got] != 0 {
				t.Fatalf("p=%v: draw %d is token %d (bias %v), the reference's %d", p, i, got, bans[got], want)
			}
		}
	}
}

// TestTop compares Top with the first n of a full sort.
func TestTop(t *testing.T) {
	var s Sampler
	for name, logits := range testLogits() {
		order := make([]int32, len(logits))
		for i := range order {
			order[i] = int32(i)
		}
		slices.SortStableFunc(order, func(a, b int32) int {
			switch {
			case logits[a] > logits[b]:
				return -1
			case logits[a] < logits[b]:
				return 1
			}
			return 0
		})
		for _, n := range []int{0, 1, 3, 5, 64, len(logits), len(logits) + 3} {
			got := s.Top(nil, logits, n)
			if want := order[:min(n, len(order))]; !slices.Equal(got, want) {
				i := 0
				for i < min(len(got), len(want)) && got[i] == want[i] {
					i++
				}
				t.Errorf("%s: Top(%d) has %d tokens, the first %d right; want %d", name, n, len(got), i, len(want))
			}
		}
	}
}

// TestPlain: plain temperature sampling draws each token as often as
// softmax(logits/T) says, on a vocabulary large enough to have many
// tokens of tiny probability, and never a token of weight 0.
func TestPlain(t *testing.T) {
	const V, draws = 64, 400000
	logits := make([]float32, V)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range logits {
		logits[i] = float32(2 * rng.NormFloat64())
	}
	logits[3] = -200 // e^-200 underflows: never drawn
	for _, temp := range []float64{0.7, 1.5} {
		want := make([]float64, V)
		var sum float64
		for i, l := range logits {
			want[i] = math.Exp(float64(l) / temp)
			sum += want[i]
		}
		s := Sampler{Settings: Settings{Temperature: temp, TopP: 1}, Rand: rand.New(rand.NewPCG(7, 8))}
		counts := make([]float64, V)
		for range draws {
			counts[draw(t, &s, logits)]++
		}
		for i := range counts {
			p := want[i] / sum
			got := counts[i] / draws
			if tol := 5*math.Sqrt(p*(1-p)/draws) + 1e-6; math.Abs(got-p) > tol {
				t.Errorf("T=%v, token %d: frequency %.5f, want %.5f", temp, i, got, p)
			}
		}
		if counts[3] != 0 {
			t.Errorf("T=%v: a token of weight 0 was drawn %v times", temp, counts[3])
		}
	}
}

// benchLogits are 16 rows of logits over GPT-2's vocabulary (50257):
// normal with standard deviation 3, about as peaked as a trained model's.
func benchLogits() [][]float32 {
	rng := rand.New(rand.NewPCG(1, 1))
	rows := make([][]float32, 16)
	for r := range rows {
		rows[r] = make([]float32, 50257)
		for i := range rows[r] {
			rows[r][i] = float32(3 * rng.NormFloat64())
		}
	}
	return rows
}

// BenchmarkNext times drawing one token for each of 16 sequences over
// GPT-2's vocabulary, the sampling of one step of a server decoding 16
// sequences, with the reference (a sort of the vocabulary) and Next.
func BenchmarkNext(b *testing.B) {
	rows := benchLogits()
	for _, tc := range []struct {
		name string
		s    Sampler
	}{
		{"greedy", Sampler{Settings: Settings{Temperature: 0, TopP: 1}}},
		{"temperature", Sampler{Settings: Settings{Temperature: 1, TopP: 1}}},
		{"top_k=40", Sampler{Settings: Settings{Temperature: 1, TopK: 40, TopP: 1}}},
		{"top_p=0.9", Sampler{Settings: Settings{Temperature: 1, TopP: 0.9}}},
		{"top_p=0.95,T=0.8", Sampler{Settings: Settings{Temperature: 0.8, TopP: 0.95}}},
	} {
		for _, impl := range []string{"reference", "Next"} {
			b.Run(tc.name+"/"+impl, func(b *testing.B) {
				s := tc.s
				s.Rand = rand.New(rand.NewPCG(1, 2))
				for b.Loop() {
					for _, r := range rows {
						if impl == "reference" {
							reference(&s, r)
						} else {
							s.Next(r) // finite logits: no error
						}
					}
				}
			})
		}
	}
	b.Run("top5/sort", func(b *testing.B) {
		ids := make([]int32, 50257)
		for b.Loop() {
			for _, r := range rows {
				for i := range ids {
					ids[i] = int32(i)
				}
				slices.SortStableFunc(ids, func(x, y int32) int {
					switch {
					case r[x] > r[y]:
						return -1
					case r[x] < r[y]:
						return 1
					}
					return 0
				})
			}
		}
	})
	b.Run("top5/Top", func(b *testing.B) {
		var s Sampler
		var ids []int32
		for b.Loop() {
			for _, r := range rows {
				ids = s.Top(ids[:0], r, 5)
			}
		}
	})
}
