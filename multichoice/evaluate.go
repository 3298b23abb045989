package multichoice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"unicode/utf8"
)

// Options say what Evaluate evaluates.
type Options struct {
	// Shots is the number of solved examples before each question.
	Shots int
	// ShotPool is where the shots are drawn from (a training split); nil
	// draws them from the set evaluated, never the question itself.
	ShotPool []Example
	// Limit, if positive, evaluates a sample of that many of the set's
	// examples, drawn with Seed, rather than all of them.
	Limit int
	// Seed draws the sample and the shots.
	Seed uint64
	// Progress, if not nil, is called after each example.
	Progress func(done, total int)
}

// Metric is an accuracy and its standard error.
type Metric struct {
	Value  float64
	StdErr float64 // NaN for fewer than 2 examples
}

// Result is the outcome of an evaluation: the harness's three
// accuracies over the examples evaluated. acc picks the choice of the
// highest log-likelihood; acc_norm the highest log-likelihood per
// character of the choice (the harness's len(choice), which counts code
// points); acc_bytes per byte of the choice in UTF-8. For ASCII text the
// last two agree.
type Result struct {
	Examples int
	Acc      Metric
	AccNorm  Metric
	AccBytes Metric
}

// Sample is how one example was scored: the texts scored (the prompt
// with its shots, and each choice's continuation of it), their
// log-likelihoods and the choice each rule picks.
type Sample struct {
	Line          int       `json:"line"`
	Label         int       `json:"label"`
	Prompt        string    `json:"prompt"`
	Continuations []string  `json:"continuations"`
	LogLik        []float64 `json:"loglik"`
	Greedy        []bool    `json:"greedy"`
	Tokens        []int     `json:"tokens"`
	Pred          int       `json:"pred"`
	PredNorm      int       `json:"pred_norm"`
	PredBytes     int       `json:"pred_bytes"`
	Dropped       int       `json:"dropped,omitempty"`
}

// Evaluate scores the examples of set (or a sample of them) with sc and
// returns the accuracies and each example's scores. It stops early with
// ctx's error when ctx is done.
func Evaluate(ctx context.Context, sc *Scorer, set *Set, o Options) (Result, []Sample, error) {
	idx := make([]int, len(set.Examples))
	for i := range idx {
		idx[i] = i
	}
	if o.Limit > 0 && o.Limit < len(idx) {
		idx = sampleIndices(len(idx), o.Limit, o.Seed)
	}
	shots := Shots{K: o.Shots, Pool: o.ShotPool, Seed: o.Seed}
	if shots.Pool == nil {
		shots.Pool = set.Examples
	}
	var samples []Sample
	for n, i := range idx {
		if err := ctx.Err(); err != nil {
			return Result{}, nil, err
		}
		ex := set.Examples[i]
		sh, err := shots.Draw(ex)
		if err != nil {
			return Result{}, nil, fmt.Errorf("%s:%d: %w", set.Path, ex.Line, err)
		}
		prompt, conts := Prompt(ex, sh), Continuations(ex)
		s, err := sc.Score(prompt, conts)
		if err != nil {
			return Result{}, nil, fmt.Errorf("%s:%d: %w", set.Path, ex.Line, err)
		}
		sample := judge(ex, s)
		sample.Prompt, sample.Continuations = prompt, conts
		samples = append(samples, sample)
		if o.Progress != nil {
			o.Progress(n+1, len(idx))
		}
	}
	if len(samples) == 0 {
		return Result{}, nil, errors.New("no examples to evaluate")
	}
	return Summarize(samples), samples, nil
}

// judge returns the sample of ex scored s: the choice each rule picks.
func judge(ex Example, s Scores) Sample {
	chars, bytes := make([]float64, len(ex.Choices)), make([]float64, len(ex.Choices))
	for i, c := range ex.Choices {
		chars[i], bytes[i] = float64(utf8.RuneCountInString(c)), float64(len(c))
	}
	return Sample{
		Line: ex.Line, Label: ex.Label, LogLik: s.LogLik, Greedy: s.Greedy, Tokens: s.Tokens, Dropped: s.Dropped,
		Pred: pick(s.LogLik, nil), PredNorm: pick(s.LogLik, chars), PredBytes: pick(s.LogLik, bytes),
	}
}

// pick returns the index of the largest ll[i]/by[i] (ll[i] without by),
// the first of equals, as numpy's argmax. A choice of length 0 gives
// ±Inf or NaN, as it does in the harness.
func pick(ll, by []float64) int {
	best, bv := 0, math.NaN()
	for i, v := range ll {
		if by != nil {
			v /= by[i]
		}
		if i == 0 || v > bv || (math.IsNaN(v) && !math.IsNaN(bv)) {
			best, bv = i, v
		}
	}
	return best
}

// Summarize returns the accuracies of samples, each with the standard
// error of the mean of its 0/1 outcomes (the harness's mean_stderr: the
// sample standard deviation, over n − 1, divided by √n).
func Summarize(samples []Sample) Result {
	acc := func(pred func(Sample) int) Metric {
		xs := make([]float64, len(samples))
		for i, s := range samples {
			if pred(s) == s.Label {
				xs[i] = 1
			}
		}
		return meanStderr(xs)
	}
	return Result{
		Examples: len(samples),
		Acc:      acc(func(s Sample) int { return s.Pred }),
		AccNorm:  acc(func(s Sample) int { return s.PredNorm }),
		AccBytes: acc(func(s Sample) int { return s.PredBytes }),
	}
}

func meanStderr(xs []float64) Metric {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	n := float64(len(xs))
	mu := sum / n
	if len(xs) < 2 {
		return Metric{mu, math.NaN()}
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mu) * (x - mu)
	}
	return Metric{mu, math.Sqrt(ss/(n-1)) / math.Sqrt(n)}
}

// sampleIndices returns n of the indices [0, size) drawn with seed, in
// ascending order (the paper evaluates a random 500 of HellaSwag and
// PIQA).
func sampleIndices(size, n int, seed uint64) []int {
	idx := rand.New(rand.NewPCG(seed, 0x6c696d6974)).Perm(size)[:n] // "limit"
	slices.Sort(idx)
	return idx
}
