package task

import (
	"fmt"
	"math"
)

// Metrics are a model's scores on examples, over answer positions only.
type Metrics struct {
	Loss     float64 `json:"loss"`     // mean cross-entropy per answer token, nats
	Accuracy float64 `json:"accuracy"` // fraction of answer tokens predicted right (arg max)
	Exact    float64 `json:"exact"`    // fraction of examples with every answer token right
	Tokens   int     `json:"tokens"`   // answer tokens scored
	Examples int     `json:"examples"` // examples scored
}

// Score accumulates Metrics over batches of examples.
type Score struct {
	loss           float64
	right, tokens  int
	exact, samples int
}

// Add scores the logits of a batch, [len(exs), Length, vocab] in row-major
// order, against the examples' targets.
func (s *Score) Add(logits []float32, vocab int, exs []Example) {
	pos := 0
	for _, ex := range exs {
		if len(logits) < (pos+len(ex.Targets))*vocab {
			panic(fmt.Sprintf("task.Score.Add: %d logits for %d examples of %d positions, vocabulary %d", len(logits), len(exs), len(ex.Targets), vocab))
		}
		all := true
		for i, t := range ex.Targets {
			if t < 0 {
				continue
			}
			row := logits[(pos+i)*vocab : (pos+i+1)*vocab]
			best := 0
			m := math.Inf(-1)
			for j, v := range row {
				if float64(v) > m {
					m, best = float64(v), j
				}
			}
			var sum float64
			for _, v := range row {
				sum += math.Exp(float64(v) - m)
			}
			s.loss += math.Log(sum) - (float64(row[t]) - m)
			s.tokens++
			if best == int(t) {
				s.right++
			} else {
				all = false
			}
		}
		if all {
			s.exact++
		}
		s.samples++
		pos += len(ex.Targets)
	}
}

// Metrics returns the scores so far.
func (s *Score) Metrics() Metrics {
	m := Metrics{Tokens: s.tokens, Examples: s.samples}
	if s.tokens > 0 {
		m.Loss = s.loss / float64(s.tokens)
		m.Accuracy = float64(s.right) / float64(s.tokens)
	}
	if s.samples > 0 {
		m.Exact = float64(s.exact) / float64(s.samples)
	}
	return m
}
