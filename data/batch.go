package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
)

// A Batch is B windows of N+1 consecutive tokens, stored row after row in
// Tokens. In each window the first N tokens are a model's inputs and the
// last N its targets: the token that follows each input.
type Batch struct {
	B, N   int
	Tokens []int32 // B×(N+1)
}

// Inputs returns the first N tokens of window i.
func (b *Batch) Inputs(i int) []int32 {
	return b.Tokens[i*(b.N+1) : i*(b.N+1)+b.N]
}

// Targets returns the last N tokens of window i.
func (b *Batch) Targets(i int) []int32 {
	return b.Tokens[i*(b.N+1)+1 : (i+1)*(b.N+1)]
}

// A Batcher cuts batches of windows out of a token stream: at random
// places for training (NewRandom) or in order for evaluation
// (NewSequential). It is not safe for concurrent use.
type Batcher struct {
	tokens        *Tokens
	batch, seqLen int
	scratch       []byte

	// Random windows.
	pcg *rand.PCG
	rng *rand.Rand

	// Sequential windows: batch next of batches.
	sequential    bool
	next, batches int
}

// NewRandom returns a Batcher of training batches: batch windows of
// seqLen+1 tokens, each at a place drawn uniformly from those where a
// window fits in t, by a PCG generator seeded with seed. The same seed
// gives the same batches; State and SetState save and restore the
// generator, to resume training exactly.
func NewRandom(t *Tokens, batch, seqLen int, seed uint64) (*Batcher, error) {
	if err := checkWindow(t, batch, seqLen); err != nil {
		return nil, err
	}
	pcg := rand.NewPCG(seed, 0x9e3779b97f4a7c15)
	return &Batcher{tokens: t, batch: batch, seqLen: seqLen, pcg: pcg, rng: rand.New(pcg)}, nil
}

// NewSequential returns a Batcher of evaluation batches: windows of
// seqLen+1 tokens starting every seqLen tokens from the start of t, so
// that each token but the first is a target exactly once, batch windows a
// batch (the last batch may have fewer), for at most maxBatches batches if
// maxBatches > 0. After the last batch, Next returns io.EOF until Reset.
func NewSequential(t *Tokens, batch, seqLen, maxBatches int) (*Batcher, error) {
	if err := checkWindow(t, batch, seqLen); err != nil {
		return nil, err
	}
	windows := (t.Len() - 1) / int64(seqLen)
	batches := (windows + int64(batch) - 1) / int64(batch)
	if maxBatches > 0 {
		batches = min(batches, int64(maxBatches))
	}
	return &Batcher{tokens: t, batch: batch, seqLen: seqLen, sequential: true, batches: int(batches)}, nil
}

func checkWindow(t *Tokens, batch, seqLen int) error {
	if batch < 1 || seqLen < 1 {
		return fmt.Errorf("batch size %d and sequence length %d must be at least 1", batch, seqLen)
	}
	if need := int64(seqLen) + 1; t.Len() < need {
		return fmt.Errorf("%s has %d tokens, but a window of sequence length %d needs %d: use a shorter sequence length or a larger corpus",
			t, t.Len(), seqLen, need)
	}
	return nil
}

// Batches returns the number of batches of a sequential Batcher, or 0 for
// a random one, which never ends.
func (b *Batcher) Batches() int { return b.batches }

// Reset makes a sequential Batcher start again from its first batch.
func (b *Batcher) Reset() { b.next = 0 }

// Next reads the next batch into dst, reusing its storage. It returns
// io.EOF after the last batch of a sequential Batcher, or an error if the
// token file cannot be read.
func (b *Batcher) Next(dst *Batch) error {
	rows := b.batch
	var first int64 // sequential: the first window
	if b.sequential {
		if b.next >= b.batches {
			return io.EOF
		}
		first = int64(b.next) * int64(b.batch)
		windows := (b.tokens.Len() - 1) / int64(b.seqLen)
		rows = int(min(int64(rows), windows-first))
	}
	w := b.seqLen + 1
	dst.B, dst.N = rows, b.seqLen
	dst.Tokens = slices.Grow(dst.Tokens[:0], rows*w)[:rows*w]
	for i := range rows {
		var start int64
		if b.sequential {
			start = (first + int64(i)) * int64(b.seqLen)
		} else {
			start = int64(b.rng.Uint64N(uint64(b.tokens.Len() - int64(b.seqLen))))
		}
		var err error
		if b.scratch, err = b.tokens.copy(dst.Tokens[i*w:(i+1)*w], start, b.scratch); err != nil {
			return err
		}
	}
	if b.sequential {
		b.next++
	}
	return nil
}

// State returns the Batcher's position: the generator state of a random
// Batcher, the next batch of a sequential one.
func (b *Batcher) State() ([]byte, error) {
	if b.sequential {
		return binary.BigEndian.AppendUint64([]byte("seq:"), uint64(b.next)), nil
	}
	return b.pcg.MarshalBinary()
}

// SetState restores a position saved by State of a Batcher of the same
// kind: the batches that follow are those that followed then.
func (b *Batcher) SetState(state []byte) error {
	if !b.sequential {
		if err := b.pcg.UnmarshalBinary(state); err != nil {
			return fmt.Errorf("restoring random batcher: %w", err)
		}
		return nil
	}
	if len(state) != 12 || string(state[:4]) != "seq:" {
		return errors.New("restoring sequential batcher: invalid state")
	}
	next := binary.BigEndian.Uint64(state[4:])
	if next > uint64(b.batches) {
		return fmt.Errorf("restoring sequential batcher: batch %d of %d", next, b.batches)
	}
	b.next = int(next)
	return nil
}
