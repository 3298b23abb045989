// Package multichoice evaluates language models on multiple-choice
// questions (HellaSwag, PIQA, ARC and the like) as EleutherAI's
// lm-evaluation-harness does, so that its numbers compare with the
// papers': each choice is scored by its log-likelihood given the
// question, the prompt and few-shot examples are laid out as the
// harness's tasks lay them out, and the accuracies (acc, acc_norm,
// acc_bytes) and their standard errors are computed as the harness
// computes them.
//
// The choices of a question share its context's computation: a Scorer
// reads the context once, keeps the model's decoding state
// (model.Snapshot) and continues each choice from a copy of it. For
// polysketch the state has a constant size, so a question with long
// few-shot context and four short endings costs little more than one
// pass over the context.
package multichoice

import (
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/polysketch/polysketch/internal/field"
)

// Example is one multiple-choice question.
type Example struct {
	// Query is the question as the prompt shows it (the harness's
	// doc_to_text): "Question: …\nAnswer:" for PIQA and ARC, HellaSwag's
	// cleaned context, a generic file's context as it is.
	Query string
	// Choices are the answers, each scored as the continuation
	// TargetDelimiter + choice of the query.
	Choices []string
	Label   int // the index of the right choice
	Line    int // of the file it was read from (the row of Parquet), from 1
}

// The harness's delimiters: between a question and its answer, and
// after each solved example of a few-shot prompt.
const (
	TargetDelimiter  = " "
	FewshotDelimiter = "\n\n"
)

// Prompt returns the context of ex after the solved examples shots, as
// the harness joins them: each shot's query, the target delimiter and
// its right answer, then the few-shot delimiter; then ex's query. Its
// choices continue it as Continuations gives them.
func Prompt(ex Example, shots []Example) string {
	var b strings.Builder
	for _, s := range shots {
		b.WriteString(s.Query)
		b.WriteString(TargetDelimiter)
		b.WriteString(s.Choices[s.Label])
		b.WriteString(FewshotDelimiter)
	}
	b.WriteString(ex.Query)
	return b.String()
}

// Continuations returns the texts whose likelihoods after the prompt
// score ex's choices: the target delimiter and the choice.
func Continuations(ex Example) []string {
	out := make([]string, len(ex.Choices))
	for i, c := range ex.Choices {
		out[i] = TargetDelimiter + c
	}
	return out
}

// same reports whether a and b are the same question with the same
// answer, wherever they were read from.
func same(a, b Example) bool {
	return a.Query == b.Query && a.Label == b.Label && slices.Equal(a.Choices, b.Choices)
}

// Shots draws the solved examples of few-shot prompts: K of Pool for
// each question, never the question itself nor a copy of it (the same
// query, choices and answer; Pool may be the set evaluated), drawn by a
// generator seeded with Seed and the question's line, so that a question
// gets the same shots whichever others are evaluated with it.
type Shots struct {
	K    int
	Pool []Example
	Seed uint64
}

// Draw returns the shots of ex.
func (s Shots) Draw(ex Example) ([]Example, error) {
	if s.K <= 0 {
		return nil, nil
	}
	excluded := func(i int) bool { return same(s.Pool[i], ex) }
	free := 0
	for i := range s.Pool {
		if !excluded(i) {
			free++
		}
	}
	if free < s.K {
		return nil, field.Invalid("shots", s.K, "only %d other examples to draw them from", free)
	}
	rng := rand.New(rand.NewPCG(s.Seed, uint64(ex.Line)))
	picked := make([]int, 0, s.K)
	if 2*s.K > free {
		// Most of the pool: a shuffle of what is free.
		var idx []int
		for i := range s.Pool {
			if !excluded(i) {
				idx = append(idx, i)
			}
		}
		rng.Shuffle(len(idx), func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
		picked = idx[:s.K]
	} else {
		for len(picked) < s.K {
			if i := rng.IntN(len(s.Pool)); !excluded(i) && !slices.Contains(picked, i) {
				picked = append(picked, i)
			}
		}
	}
	out := make([]Example, len(picked))
	for i, p := range picked {
		out[i] = s.Pool[p]
	}
	return out, nil
}
