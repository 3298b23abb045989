package train

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/model"
)

// ErrStartup is wrapped by the error Start (or Withdraw) returns on a
// rank other than 0 when the ranks of a data-parallel run fail to start
// together: rank 0's error says why, so the others need not.
var ErrStartup = errors.New("the ranks failed to start the run; rank 0 reports why")

// Withdraw takes this rank's part in the start-up agreement of Start with
// err, the reason it cannot start, instead of a run. A rank that fails
// before it reaches Start calls it, so that the ranks in Start learn of
// the failure and fail too, instead of waiting for it forever. It returns
// the error to report: on rank 0, err or the failure of another rank; on
// the others, an error wrapping ErrStartup. (With err nil the rank starts
// nothing and fails only with the others, or if they start a run.)
func Withdraw(comm Comm, err error) error {
	return agree(comm, err, nil)
}

// startParts names what every rank must agree on before training.
type startParts struct {
	Model model.Config `json:"model"`
	Train Config       `json:"train"`
	Stage string       `json:"stage,omitempty"`
	// Data identifies the source (Source.digest).
	Data string `json:"tokens"`
	// Checkpoint is the step and digest of the weights resumed from, ""
	// if none.
	Checkpoint string `json:"checkpoint"`
}

// recordSize is the bytes each rank sends in the agreement: its error,
// or its parts in JSON.
const recordSize = 16 << 10

// agree is the ranks' start-up agreement: every rank sends its failure,
// if it has one, or what it is about to do (parts, nil for nothing); every
// rank then fails, rank 0 naming the first rank that failed or differs
// from it and how, the others with ErrStartup, unless all agree.
func agree(comm Comm, failure error, parts *startParts) error {
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
	k := comm.Size()
	all := make([]byte, k*recordSize)
	if err := comm.Allgather(rec, all); err != nil {
		return fmt.Errorf("start-up agreement across the ranks: %w", err)
	}
	get := func(r int) []byte {
		b := all[r*recordSize:]
		return b[4 : 4+binary.LittleEndian.Uint32(b)]
	}
	rank := comm.Rank()
	for r := range k {
		if b := get(r); b[0] == 'E' {
			switch {
			case rank != 0:
				return fmt.Errorf("rank %d: %w", rank, ErrStartup)
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
		if rank != 0 {
			return fmt.Errorf("rank %d: %w", rank, ErrStartup)
		}
		var p0, pr startParts
		diffs := []string{"configuration"}
		if json.Unmarshal(first[1:], &p0) == nil && json.Unmarshal(b[1:], &pr) == nil {
			diffs = checkpoint.Diff(p0, pr)
		}
		return fmt.Errorf("rank %d differs from rank 0 in %s: every rank must start the same run on the same data (the same program, configuration and corpus or token cache)",
			r, strings.Join(diffs, "; "))
	}
	return nil
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
