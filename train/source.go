package train

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/model"
)

// Source is the data a run trains and validates on: a *Corpus or a
// *Task. Start chooses it once; the trainer draws batches from it without
// asking which it is.
type Source interface {
	// open checks the source against the run's model and recipe and
	// returns its stream of batches, at the start of the training data.
	open(mc model.Config, tc Config) (feed, error)
	// digest identifies the data, for the ranks' start-up agreement.
	digest() string
}

// feed is a Source opened for one run.
type feed interface {
	// next fills b with the next training batch.
	next(b *Batch) error
	// state returns the position in the training data, for a
	// checkpoint; setState moves to a position state returned.
	state() ([]byte, error)
	setState(pos []byte) error
	// validate scores m on the held-out data.
	validate(ctx context.Context, m *model.Model) (Eval, error)
}

// Batch is one micro-batch: B sequences of N input tokens and the N
// targets of each, row after row. A target of -1 is not predicted (a
// task's positions outside its answer).
type Batch struct {
	B, N    int
	Inputs  []int32
	Targets []int32
}

// Corpus is the Source of a run on text: windows of the model's context
// drawn at random from Train (in an order the recipe's Seed fixes), and
// validated on Val read in order, at most EvalBatches batches.
type Corpus struct {
	Train, Val *data.Tokens
}

// Task is the Source of a run on a synthetic task or a task file: its
// training examples drawn in turn, and validated on its test examples
// (loss, accuracy and exact match over the answer positions). Its Spec
// must be the recipe's Task.
type Task struct {
	Set *task.Set
}

func (c *Corpus) open(mc model.Config, tc Config) (feed, error) {
	for _, tok := range []*data.Tokens{c.Train, c.Val} {
		if tok.Tokenizer() != tc.Tokenizer || tok.VocabSize() != mc.Vocab {
			return nil, fmt.Errorf("%s holds %s tokens (vocabulary %d); the run needs %s tokens for a model of vocabulary %d",
				tok, tok.Tokenizer(), tok.VocabSize(), tc.Tokenizer, mc.Vocab)
		}
	}
	f := &corpusFeed{}
	var err error
	if f.batches, err = data.NewRandom(c.Train, tc.Batch, mc.Context, tc.Seed); err != nil {
		return nil, fmt.Errorf("training data: %w", err)
	}
	if c.Val.Len() < 2 {
		return nil, fmt.Errorf("validation data: %s has %d tokens, too few to validate on (need 2)", c.Val, c.Val.Len())
	}
	if f.val, err = data.NewSequential(c.Val, tc.Batch, min(mc.Context, int(c.Val.Len()-1)), tc.EvalBatches); err != nil {
		return nil, fmt.Errorf("validation data: %w", err)
	}
	return f, nil
}

// digest identifies the tokens without reading them all: their sizes,
// tokenizer and 64 windows of 64 tokens spread over each split.
func (c *Corpus) digest() string {
	h := sha256.New()
	buf := make([]int32, 64)
	for _, t := range []*data.Tokens{c.Train, c.Val} {
		fmt.Fprintf(h, "%s %d %d\n", t.Tokenizer(), t.VocabSize(), t.Len())
		n := t.Len()
		for i := range int64(64) {
			w := min(int64(len(buf)), n)
			off := (n - w) * i / 63
			if err := t.Copy(buf[:w], off); err != nil {
				fmt.Fprintf(h, "error %v\n", err)
				break
			}
			binary.Write(h, binary.LittleEndian, buf[:w])
		}
	}
	return fmt.Sprintf("%d training and %d validation tokens, sha256 of a sample %x", c.Train.Len(), c.Val.Len(), h.Sum(nil)[:8])
}

// corpusFeed is a Corpus opened for a run.
type corpusFeed struct {
	batches, val *data.Batcher
	batch        data.Batch
	eval         evaluator
}

func (f *corpusFeed) next(b *Batch) error {
	if err := f.batches.Next(&f.batch); err != nil {
		return err
	}
	b.B, b.N = f.batch.B, f.batch.N
	b.Inputs, b.Targets = split(f.batch, b.Inputs, b.Targets)
	return nil
}

func (f *corpusFeed) state() ([]byte, error)    { return f.batches.State() }
func (f *corpusFeed) setState(pos []byte) error { return f.batches.SetState(pos) }

func (f *corpusFeed) validate(ctx context.Context, m *model.Model) (Eval, error) {
	return f.eval.run(ctx, m, f.val)
}

func (s *Task) open(mc model.Config, tc Config) (feed, error) {
	set := s.Set
	switch {
	case tc.Task == nil || *tc.Task != set.Spec:
		return nil, fmt.Errorf("the training configuration's task %+v is not the task given, %+v", tc.Task, set.Spec)
	case set.Vocab() != mc.Vocab:
		return nil, fmt.Errorf("task %s has %d token ids; the model's vocabulary is %d", set.Spec.Name, set.Vocab(), mc.Vocab)
	case set.Length() > mc.Context:
		return nil, fmt.Errorf("task %s has examples of %d tokens, longer than the model's context %d", set.Spec.Name, set.Length(), mc.Context)
	}
	return &taskFeed{set: set, exs: make([]task.Example, tc.Batch), batch: tc.Batch}, nil
}

// digest identifies the task by its spec, which the recipe holds, and its
// test examples.
func (s *Task) digest() string {
	h := sha256.New()
	for _, ex := range s.Set.Test {
		binary.Write(h, binary.LittleEndian, ex.Tokens)
		binary.Write(h, binary.LittleEndian, ex.Targets)
	}
	return fmt.Sprintf("task %s, %d test examples, sha256 %x", s.Set.Spec.Name, len(s.Set.Test), h.Sum(nil)[:8])
}

// taskFeed is a Task opened for a run.
type taskFeed struct {
	set   *task.Set
	draw  uint64 // the stream position of the next training example
	exs   []task.Example
	batch int
}

func (f *taskFeed) next(b *Batch) error {
	b.Inputs, b.Targets = b.Inputs[:0], b.Targets[:0]
	for i := range f.exs {
		f.set.Draw(&f.exs[i], &f.draw)
		b.Inputs = append(b.Inputs, f.exs[i].Tokens...)
		b.Targets = append(b.Targets, f.exs[i].Targets...)
	}
	b.B, b.N = len(f.exs), f.set.Length()
	return nil
}

func (f *taskFeed) state() ([]byte, error) {
	return binary.LittleEndian.AppendUint64(nil, f.draw), nil
}

func (f *taskFeed) setState(pos []byte) error {
	if len(pos) != 8 {
		return fmt.Errorf("task position of %d bytes, want 8: the checkpoint was not made by a task run", len(pos))
	}
	f.draw = binary.LittleEndian.Uint64(pos)
	return nil
}

func (f *taskFeed) validate(ctx context.Context, m *model.Model) (Eval, error) {
	return evaluateTask(ctx, m, f.set, f.batch)
}
