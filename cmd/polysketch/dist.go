package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/train"
)

// distRun is this process's part of a data-parallel train under mpirun;
// nil when the process trains alone. Its methods work on a nil distRun,
// as a single process.
type distRun struct {
	comm     train.Comm
	abort    func(code int)
	finalize func() error
	checked  bool // the start-up check ran: every rank is past it
	started  bool // training started: a failure must end every rank
}

// errReported is the error of a rank other than 0 whose failure rank 0
// reports: main exits non-zero without printing it again.
var errReported = errors.New("failure reported by rank 0")

// rank returns the process's rank, 0 for a single process.
func (d *distRun) rank() int {
	if d == nil {
		return 0
	}
	return d.comm.Rank()
}

// output returns w on rank 0 and io.Discard on the others, which print
// nothing.
func (d *distRun) output(w io.Writer) io.Writer {
	if d.rank() != 0 {
		return io.Discard
	}
	return w
}

// lockRun locks the run directory on rank 0, the only one that writes it.
func (d *distRun) lockRun(out string) (func(failed bool), error) {
	if d.rank() != 0 {
		return func(bool) {}, nil
	}
	return lockRun(out)
}

// finish ends the process's part: if the start-up check has not run (an
// error came first), it runs it with the error, so that the other ranks
// learn of it instead of waiting; a failure after training started aborts
// every rank. It then shuts MPI down. Deferred by runTrain with its error.
func (d *distRun) finish(errp *error) {
	if d == nil {
		return
	}
	help := errors.Is(*errp, flag.ErrHelp)
	if !d.checked {
		*errp = d.check(*errp, nil)
	}
	if *errp != nil && d.started && !errors.Is(*errp, errReported) {
		fmt.Fprintf(os.Stderr, "polysketch: rank %d: %v; ending every rank\n", d.rank(), *errp)
		d.abort(1)
	}
	if *errp != nil && !d.started && !help {
		// Every rank failed the start-up check together. Rank 0 prints
		// the reason now, and no rank leaves before it has: mpirun ends
		// the job as soon as one rank exits non-zero, which could kill
		// rank 0 before it printed.
		if d.rank() == 0 && !errors.Is(*errp, errReported) {
			fmt.Fprintln(os.Stderr, "polysketch:", *errp)
			*errp = errReported
		}
		one := []byte{0}
		d.comm.Allgather(one, make([]byte, d.comm.Size())) // a barrier; its own failure changes nothing
	}
	if err := d.finalize(); err != nil && *errp == nil {
		*errp = err
	}
	if help {
		*errp = flag.ErrHelp // -h: rank 0 printed the usage; every rank exits 0
	} else if d.rank() != 0 && *errp != nil && !errors.Is(*errp, errReported) {
		fmt.Fprintf(os.Stderr, "polysketch: rank %d: %v\n", d.rank(), *errp)
		*errp = errReported
	}
}

// startParts names what every rank must agree on before training.
type startParts struct {
	Model      model.Config `json:"model"`
	Train      train.Config `json:"train"`
	Tokens     string       `json:"tokens"`     // digest of the training and validation tokens
	Checkpoint string       `json:"checkpoint"` // step and digest of the weights resumed from, "" if none
}

// recordSize is the bytes each rank sends in the start-up check: its
// error, or its configuration in JSON.
const recordSize = 16 << 10

// check is the start-up check: every rank sends its error, if it has
// one, or what it is about to train; every rank then fails, naming the
// first rank that differs from rank 0 and how, unless all agree.
func (d *distRun) check(failure error, parts *startParts) error {
	d.checked = true
	rec := make([]byte, recordSize)
	var body []byte
	if failure != nil {
		body = append([]byte{'E'}, failure.Error()...)
	} else {
		j, err := json.Marshal(parts)
		if err != nil {
			return err
		}
		body = append([]byte{'C'}, j...)
	}
	if len(body) > recordSize-4 {
		sum := sha256.Sum256(body)
		body = append(body[:1], fmt.Sprintf(`{"digest":"%x"}`, sum)...) // too long to diff: compare digests
	}
	binary.LittleEndian.PutUint32(rec, uint32(len(body)))
	copy(rec[4:], body)
	k := d.comm.Size()
	all := make([]byte, k*recordSize)
	if err := d.comm.Allgather(rec, all); err != nil {
		return fmt.Errorf("start-up check across the ranks: %w", err)
	}
	get := func(r int) []byte {
		b := all[r*recordSize:]
		return b[4 : 4+binary.LittleEndian.Uint32(b)]
	}
	for r := range k {
		if b := get(r); b[0] == 'E' {
			switch {
			case d.rank() != 0:
				return errReported
			case r == 0:
				return failure
			}
			return fmt.Errorf("rank %d failed at start-up: %s", r, b[1:])
		}
	}
	first := get(0)
	for r := 1; r < k; r++ {
		b := get(r)
		if bytes.Equal(b, first) {
			continue
		}
		if d.rank() != 0 {
			return errReported
		}
		var p0, pr startParts
		diffs := []string{"configuration"}
		if json.Unmarshal(first[1:], &p0) == nil && json.Unmarshal(b[1:], &pr) == nil {
			diffs = checkpoint.Diff(p0, pr)
		}
		return fmt.Errorf("rank %d differs from rank 0 in %s: start every rank with the same binary, flags and corpus (or token cache)",
			r, strings.Join(diffs, "; "))
	}
	return nil
}

// newTrainer checks that every rank is about to train the same thing and
// makes this rank's trainer: train.New or Resume in a single process,
// train.Join under mpirun.
func (d *distRun) newTrainer(out string, mc model.Config, tc train.Config, c *checkpoint.Checkpoint, trainTokens, valTokens *data.Tokens) (*train.Trainer, error) {
	if d == nil {
		if c != nil {
			return train.Resume(out, c, tc, trainTokens, valTokens)
		}
		return train.New(out, mc, tc, trainTokens, valTokens)
	}
	if k := d.comm.Size(); tc.Accum%k != 0 {
		return nil, d.check(fmt.Errorf("--accum %d is not a multiple of the %d ranks: the global batch (--batch × --accum) is split across the ranks; pass --accum %d, %d, …", tc.Accum, k, k, 2*k), nil)
	}
	parts := &startParts{Model: mc, Train: tc, Tokens: tokensDigest(trainTokens, valTokens)}
	if c != nil {
		parts.Checkpoint = fmt.Sprintf("step %d, weights %s", c.State.Step, weightsDigest(c.Model))
	}
	if err := d.check(nil, parts); err != nil {
		return nil, err
	}
	d.started = true
	return train.Join(d.comm, train.DistOptions{}, out, mc, c, tc, trainTokens, valTokens)
}

// tokensDigest identifies tokens without reading them all: their sizes,
// tokenizer and 64 windows of 64 tokens spread over each split.
func tokensDigest(ts ...*data.Tokens) string {
	h := sha256.New()
	buf := make([]int32, 64)
	for _, t := range ts {
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
	return fmt.Sprintf("%d training and %d validation tokens, sha256 of a sample %x", ts[0].Len(), ts[1].Len(), h.Sum(nil)[:8])
}

// weightsDigest hashes a model's weights.
func weightsDigest(m *model.Model) string {
	h := sha256.New()
	var b [4]byte
	for _, p := range m.Params() {
		for _, v := range p.Value.Data {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			h.Write(b[:])
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:8])
}
