package model

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/polysketch/polysketch/attention"
)

// Snapshot is a copy of a Sequence's decoding state at one position: the
// attention state of every layer (see attention.State). A Sequence of the
// same model restored from it (Restore) continues exactly as the one
// snapshotted would have, bit for bit, so that a server can keep the state
// after a shared prefix and resume requests from it instead of reading
// the prefix again.
//
// Its size is constant for polysketch (each head's prefix state and the
// open local block) and grows with the positions for a KV cache.
type Snapshot struct {
	n      int
	layers []*attention.State
}

// Snapshot returns a copy of the sequence's state. It fails for
// mechanisms whose decoder state cannot be copied (HyperAttention).
func (s *Sequence) Snapshot() (*Snapshot, error) {
	p := &Snapshot{n: s.n}
	for i, a := range s.attn {
		st, err := attention.SaveState(a)
		if err != nil {
			return nil, fmt.Errorf("snapshot of layer %d: %w", i, err)
		}
		p.layers = append(p.layers, st)
	}
	return p, nil
}

// Check reports whether p can be restored into s: a snapshot of a
// sequence of a model of the same shape and mechanism.
func (s *Sequence) Check(p *Snapshot) error {
	if p == nil {
		return errors.New("restore: no snapshot")
	}
	if len(p.layers) != len(s.attn) {
		return fmt.Errorf("restore: a snapshot of %d layers into a model of %d", len(p.layers), len(s.attn))
	}
	if s.limit > 0 && p.n > s.limit {
		return fmt.Errorf("restore: a snapshot of %d positions passes the context length %d", p.n, s.limit)
	}
	for i, st := range p.layers {
		if st.Len() != p.n {
			return fmt.Errorf("restore: layer %d of the snapshot has %d positions, the snapshot %d", i, st.Len(), p.n)
		}
		if err := attention.CheckState(s.attn[i], st); err != nil {
			return fmt.Errorf("restore: layer %d: %w", i, err)
		}
	}
	return nil
}

// Restore makes the sequence's state a copy of p, at position p.Len().
// It fails, changing nothing, when Check does.
func (s *Sequence) Restore(p *Snapshot) error {
	if err := s.Check(p); err != nil {
		return err
	}
	for i, st := range p.layers {
		if err := attention.RestoreState(s.attn[i], st); err != nil {
			panic("model: restore after its checks: " + err.Error())
		}
	}
	s.n = p.n
	return nil
}

// Len returns the position the snapshot was taken at.
func (p *Snapshot) Len() int { return p.n }

// Bytes returns the memory the snapshot's states hold.
func (p *Snapshot) Bytes() int64 {
	var n int64
	for _, st := range p.layers {
		n += st.Bytes()
	}
	return n
}

// maxSnapshotLayers bounds the layers of a snapshot read by
// UnmarshalBinary.
const maxSnapshotLayers = 1 << 10

// AppendBinary appends the snapshot's encoding to b: the position, the
// number of layers, then each layer's attention.State.
func (p *Snapshot) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint64(b, uint64(p.n))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p.layers)))
	var err error
	for _, st := range p.layers {
		if b, err = st.AppendBinary(b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// MarshalBinary returns the snapshot's encoding (AppendBinary).
func (p *Snapshot) MarshalBinary() ([]byte, error) { return p.AppendBinary(nil) }

// UnmarshalBinary reads what AppendBinary wrote, checking every count and
// length against the bytes that remain before allocating; whether it fits
// a model is for Sequence.Check to say.
func (p *Snapshot) UnmarshalBinary(b []byte) error {
	if len(b) < 12 {
		return errors.New("snapshot: truncated header")
	}
	n, count := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint32(b[8:])
	b = b[12:]
	if n > 1<<31-1 {
		return fmt.Errorf("snapshot: %d positions", n)
	}
	if count > maxSnapshotLayers || uint64(count) > uint64(len(b)/13) {
		return fmt.Errorf("snapshot: %d layers in %d bytes", count, len(b))
	}
	layers := make([]*attention.State, count)
	for i := range layers {
		st, rest, err := attention.DecodeState(b)
		if err != nil {
			return fmt.Errorf("snapshot: layer %d: %w", i, err)
		}
		if uint64(st.Len()) != n {
			return fmt.Errorf("snapshot: layer %d has %d positions, the snapshot %d", i, st.Len(), n)
		}
		layers[i], b = st, rest
	}
	if len(b) != 0 {
		return fmt.Errorf("snapshot: %d bytes after its end", len(b))
	}
	p.n, p.layers = int(n), layers
	return nil
}
