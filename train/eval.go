package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
)

// Eval is the result of evaluating a model on tokens.
type Eval struct {
	Loss    float64 // mean cross-entropy per predicted token, in nats
	Tokens  int64   // tokens predicted
	Batches int     // batches run
	// Task holds a task's scores (then Loss and Tokens are over its
	// answer positions); nil for a corpus.
	Task *task.Metrics `json:"task,omitempty"`
}

// Perplexity returns exp(Loss).
func (e Eval) Perplexity() float64 { return math.Exp(e.Loss) }

// BitsPerToken returns Loss in bits.
func (e Eval) BitsPerToken() float64 { return e.Loss / math.Ln2 }

// Evaluate returns the loss of m on tokens: windows of the model's
// context length (or all of tokens, if fewer) laid end to end from the
// start, batch windows a batch, for at most maxBatches batches (0: all),
// so that every token but the first is predicted once, from the tokens
// before it in its window. It stops early with ctx's error if ctx is
// cancelled, and with an error if the model's logits are not finite.
func Evaluate(ctx context.Context, m *model.Model, tokens *data.Tokens, batch, maxBatches int) (Eval, error) {
	n := m.Config().Context
	if tokens.Len() <= int64(n) {
		n = int(tokens.Len() - 1)
	}
	if n < 1 {
		return Eval{}, fmt.Errorf("%s has %d tokens: too few to evaluate (need at least 2)", tokens, tokens.Len())
	}
	b, err := data.NewSequential(tokens, batch, n, maxBatches)
	if err != nil {
		return Eval{}, err
	}
	var e evaluator
	return finite(e.run(ctx, m, b))
}

// finite returns an evaluation whose loss is not finite as an error: the
// model's logits overflow. (Training's validation takes such a loss as
// divergence instead.)
func finite(e Eval, err error) (Eval, error) {
	if err == nil && (math.IsNaN(e.Loss) || math.IsInf(e.Loss, 0)) {
		return e, fmt.Errorf("batch %d: the loss is %v: the model's logits are not finite; its weights or activations overflow", e.Batches, e.Loss)
	}
	return e, err
}

// evaluator runs validations, keeping its buffers between them.
type evaluator struct {
	batch           data.Batch
	inputs, targets []int32
	ce              nn.CrossEntropy
}

func (e *evaluator) run(ctx context.Context, m *model.Model, b *data.Batcher) (Eval, error) {
	b.Reset()
	var sum float64
	var r Eval
	for {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		err := b.Next(&e.batch)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return r, err
		}
		e.inputs, e.targets = split(e.batch, e.inputs, e.targets)
		// Forward and a loss without its gradient: cheaper than Loss.
		logits := m.Forward(e.inputs, e.batch.B, e.batch.N)
		loss, _ := e.ce.Loss(nil, logits, e.targets)
		k := int64(e.batch.B * e.batch.N)
		sum += loss * float64(k)
		r.Tokens += k
		r.Batches++
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			break // no loss is worth the rest
		}
	}
	if r.Tokens == 0 {
		return r, errors.New("no tokens to evaluate")
	}
	r.Loss = sum / float64(r.Tokens)
	return r, nil
}

// split copies the inputs and targets of every window of b into inputs
// and targets, reusing their storage.
func split(b data.Batch, inputs, targets []int32) ([]int32, []int32) {
	inputs, targets = inputs[:0], targets[:0]
	for i := range b.B {
		inputs = append(inputs, b.Inputs(i)...)
		targets = append(targets, b.Targets(i)...)
	}
	return inputs, targets
}
