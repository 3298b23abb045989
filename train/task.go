package train

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/chart"
	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/vec"
)

// TaskModel shapes mc for task s: the length and direction of its
// examples, and, for each of layers, heads, dim and the attention's block
// that chosen does not name, 003 App. F's model for its tasks (2 layers
// of 8 heads of 16) with blocks no longer than the examples.
func TaskModel(mc *model.Config, s *task.Spec, chosen func(field string) bool) {
	mc.Context, mc.Bidirectional = s.Length, s.Bidirectional
	if !chosen("layers") {
		mc.Layers = 2
	}
	if !chosen("heads") {
		mc.Heads = 8
	}
	if !chosen("dim") {
		mc.Dim = 16 * mc.Heads
	}
	if !chosen("block") {
		for _, opt := range attention.OptionsOf(mc.Attention) {
			if b, err := strconv.Atoi(opt.Default); opt.Name == "block" && err == nil && b > mc.Context {
				mc.Attention, _ = attention.Set(mc.Attention, "block", strconv.Itoa(mc.Context))
			}
		}
	}
}

// EvaluateTask scores m on the test examples of set, batch examples at a
// time: the loss, per-token accuracy and exact match over the answer
// positions. It stops early with ctx's error if ctx is cancelled, and
// with an error if the model's logits are not finite.
func EvaluateTask(ctx context.Context, m *model.Model, set *task.Set, batch int) (Eval, error) {
	if batch < 1 {
		return Eval{}, fmt.Errorf("batch %d: must be positive", batch)
	}
	return finite(evaluateTask(ctx, m, set, batch))
}

func evaluateTask(ctx context.Context, m *model.Model, set *task.Set, batch int) (Eval, error) {
	var s task.Score
	var tokens []int32
	var r Eval
	N, V := set.Length(), m.Config().Vocab
	for lo := 0; lo < len(set.Test); lo += batch {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		exs := set.Test[lo:min(lo+batch, len(set.Test))]
		tokens = tokens[:0]
		for _, ex := range exs {
			tokens = append(tokens, ex.Tokens...)
		}
		logits := m.Forward(tokens, len(exs), N)
		r.Batches++
		if vec.NonFinite(logits.Data) >= 0 {
			r.Loss = math.NaN() // no score is worth the rest
			return r, nil
		}
		s.Add(logits.Data, V, exs)
	}
	tm := s.Metrics()
	r.Loss, r.Tokens, r.Task = tm.Loss, int64(tm.Tokens), &tm
	return r, nil
}

// plotAccuracy draws the test accuracy and exact match of ms against step.
func plotAccuracy(path string, ms []Metrics) error {
	acc := chart.Series{Name: "per-token accuracy"}
	exact := chart.Series{Name: "exact match"}
	for _, m := range ms {
		if m.ValAccuracy != nil && m.ValExact != nil {
			acc.X = append(acc.X, float64(m.Step))
			acc.Y = append(acc.Y, *m.ValAccuracy)
			exact.X = append(exact.X, float64(m.Step))
			exact.Y = append(exact.Y, *m.ValExact)
		}
	}
	if len(acc.X) == 0 {
		return nil
	}
	return chart.Write(path, &chart.Chart{
		Title:  "test accuracy",
		X:      chart.Axis{Label: "step"},
		Y:      chart.Axis{Label: "fraction right (answer positions)"},
		Series: []chart.Series{acc, exact},
	})
}
