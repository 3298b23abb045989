package train

import (
	"context"
	"encoding/binary"
	"fmt"
)

// The methods below are where a run's data comes from: a corpus (batches
// of windows of tokens) or a task (batches of examples).

// next fills t.inputs and t.targets with the next training batch, B
// sequences of N tokens.
func (t *Trainer) next() (B, N int, err error) {
	if t.task != nil {
		return t.task.next(t)
	}
	if err := t.batches.Next(&t.batch); err != nil {
		return 0, 0, err
	}
	t.inputs, t.targets = split(t.batch, t.inputs, t.targets)
	return t.batch.B, t.batch.N, nil
}

// dataState returns the position in the training data, for a checkpoint.
func (t *Trainer) dataState() ([]byte, error) {
	if t.task != nil {
		return binary.LittleEndian.AppendUint64(nil, t.task.draw), nil
	}
	return t.batches.State()
}

// setDataState moves the training data to a position from dataState.
func (t *Trainer) setDataState(b []byte) error {
	if t.task != nil {
		if len(b) != 8 {
			return fmt.Errorf("task position of %d bytes, want 8: the checkpoint was not made by a task run", len(b))
		}
		t.task.draw = binary.LittleEndian.Uint64(b)
		return nil
	}
	return t.batches.SetState(b)
}

// validate evaluates the model on the validation split or the task's test
// examples.
func (t *Trainer) validate(ctx context.Context) (Eval, error) {
	if t.task != nil {
		return evaluateTask(ctx, t.Model, t.task.set, t.Config.Batch)
	}
	return t.eval.run(ctx, t.Model, t.val)
}
