package attention

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// State is a copy of a Decoder's state after some positions, to resume
// decoding from later (a server's prefix cache): restored into a Decoder
// of the same mechanism and shape (SaveState, RestoreState), the Decoder
// continues exactly as the one saved would have, bit for bit, since every
// Step reads nothing but its inputs, the state and the mechanism's
// parameters.
//
// A KV cache's State holds every key and value so far and grows with the
// positions; a recurrent state's (polysketch and the other mechanisms on
// the engine) holds each head's prefix state and the open local block and
// has the same size after any number of positions.
type State struct {
	kind stateKind
	n    int         // positions consumed
	data [][]float32 // the decoder's arrays, in an order of its kind
}

// stateKind tells the decoders apart in a State, so that a State is never
// restored into another kind of decoder.
type stateKind uint8

const (
	kvState     stateKind = 1 // cacheDecoder: k, v
	sketchState stateKind = 2 // sketchDecoder: see sketchDecoder.save
)

// Len returns the number of positions the State has consumed.
func (s *State) Len() int { return s.n }

// Bytes returns the memory the State's arrays hold.
func (s *State) Bytes() int64 {
	var n int64
	for _, a := range s.data {
		n += 4 * int64(len(a))
	}
	return n
}

// stateful is implemented by the Decoders whose state can be copied.
type stateful interface {
	save() *State
	check(*State) error // whether restore may take the State
	restore(*State)
}

// SaveState returns a copy of d's state. It fails for decoders whose state
// cannot be copied (HyperAttention's).
func SaveState(d Decoder) (*State, error) {
	sd, ok := unwrap(d).(stateful)
	if !ok {
		return nil, fmt.Errorf("the decoder %T has no state to save", d)
	}
	return sd.save(), nil
}

// CheckState reports whether s can be restored into d: the same kind of
// decoder and the same shapes.
func CheckState(d Decoder, s *State) error {
	sd, ok := unwrap(d).(stateful)
	if !ok {
		return fmt.Errorf("the decoder %T has no state to restore", d)
	}
	return sd.check(s)
}

// RestoreState makes d's state a copy of s. It fails, changing nothing,
// when CheckState does.
func RestoreState(d Decoder, s *State) error {
	if err := CheckState(d, s); err != nil {
		return err
	}
	unwrap(d).(stateful).restore(s)
	return nil
}

// checkArrays checks that s is of kind k with arrays of the given lengths.
func (s *State) checkArrays(k stateKind, lens ...int) error {
	if s == nil {
		return errors.New("no state")
	}
	if s.kind != k {
		return fmt.Errorf("a state of decoder kind %d, want kind %d", s.kind, k)
	}
	if len(s.data) != len(lens) {
		return fmt.Errorf("a state of %d arrays, want %d", len(s.data), len(lens))
	}
	for i, n := range lens {
		if len(s.data[i]) != n {
			return fmt.Errorf("array %d of the state has %d values, want %d for this decoder's shape", i, len(s.data[i]), n)
		}
	}
	return nil
}

// maxStateArrays bounds the arrays of a State read by UnmarshalBinary.
const maxStateArrays = 16

// AppendBinary appends the State's encoding to b: its kind, its length
// and its arrays, little-endian, each array's length first.
func (s *State) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, byte(s.kind))
	b = binary.LittleEndian.AppendUint64(b, uint64(s.n))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s.data)))
	for _, a := range s.data {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(a)))
		for _, x := range a {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
	}
	return b, nil
}

// UnmarshalBinary reads what AppendBinary wrote, checking every count and
// length against the bytes that remain before allocating anything; the
// shapes are checked by CheckState.
func (s *State) UnmarshalBinary(b []byte) error {
	rest, err := s.decode(b)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("decoder state: %d bytes after its end", len(rest))
	}
	return nil
}

// decode reads one State from the start of b and returns the bytes after
// it.
func (s *State) decode(b []byte) ([]byte, error) {
	if len(b) < 13 {
		return nil, errors.New("decoder state: truncated header")
	}
	kind, n, count := stateKind(b[0]), binary.LittleEndian.Uint64(b[1:]), binary.LittleEndian.Uint32(b[9:])
	b = b[13:]
	if kind != kvState && kind != sketchState {
		return nil, fmt.Errorf("decoder state: unknown kind %d", kind)
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("decoder state: %d positions", n)
	}
	if count > maxStateArrays {
		return nil, fmt.Errorf("decoder state: %d arrays, at most %d", count, maxStateArrays)
	}
	data := make([][]float32, count)
	for i := range data {
		if len(b) < 8 {
			return nil, errors.New("decoder state: truncated array length")
		}
		m := binary.LittleEndian.Uint64(b)
		b = b[8:]
		if m > uint64(len(b))/4 {
			return nil, fmt.Errorf("decoder state: array of %d values in %d bytes", m, len(b))
		}
		a := make([]float32, m)
		for j := range a {
			a[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
		}
		data[i] = a
		b = b[4*m:]
	}
	s.kind, s.n, s.data = kind, int(n), data
	return b, nil
}

// DecodeState reads one State from the start of b, as UnmarshalBinary
// does, and returns the bytes after it.
func DecodeState(b []byte) (*State, []byte, error) {
	s := &State{}
	rest, err := s.decode(b)
	if err != nil {
		return nil, nil, err
	}
	return s, rest, nil
}

// save copies the keys and values of the positions so far, head by head.
func (d *cacheDecoder) save() *State {
	h, n := d.h, d.n
	k, v := make([]float32, d.bkv*n*h), make([]float32, d.bkv*n*h)
	for i := range d.bkv {
		copy(k[i*n*h:(i+1)*n*h], d.k[i*d.size*h:])
		copy(v[i*n*h:(i+1)*n*h], d.v[i*d.size*h:])
	}
	return &State{kind: kvState, n: n, data: [][]float32{k, v}}
}

func (d *cacheDecoder) check(s *State) error {
	if s == nil {
		return errors.New("no state")
	}
	m := d.bkv * s.n * d.h
	if s.n < 0 || s.n > math.MaxInt32 || m/max(1, d.bkv*d.h) != s.n {
		return fmt.Errorf("a state of %d positions", s.n)
	}
	return s.checkArrays(kvState, m, m)
}

func (d *cacheDecoder) restore(s *State) {
	h, n := d.h, s.n
	d.n = 0
	if n > d.size {
		d.grow(n)
	}
	for i := range d.bkv {
		copy(d.k[i*d.size*h:], s.data[0][i*n*h:(i+1)*n*h])
		copy(d.v[i*d.size*h:], s.data[1][i*n*h:(i+1)*n*h])
	}
	d.n = n
}

// save copies the state of the block algorithm: the prefix states, the
// current block's keys (or sketches) and values, the sketches of a local
// block's keys, which heads have a previous block still to fold and, if
// any has, that block; and a scaled map's block states and references.
// Arrays a decoder does not use are empty.
func (d *sketchDecoder) save() *State {
	cp := func(x []float32) []float32 { return append([]float32(nil), x...) }
	pending := make([]float32, len(d.pending))
	anyPending := false
	for i, p := range d.pending {
		if p {
			pending[i], anyPending = 1, true
		}
	}
	var pm, pv []float32
	if anyPending { // never after a Step of several positions, which folds at once
		pm, pv = cp(d.pm), cp(d.pv)
	}
	return &State{kind: sketchState, n: d.n, data: [][]float32{
		cp(d.prefix), cp(d.keys), cp(d.vals), cp(d.cm), pending, pm, pv,
		cp(d.block), cp(d.ref), cp(d.bref), cp(d.ks),
	}}
}

func (d *sketchDecoder) check(s *State) error {
	if s == nil {
		return errors.New("no state")
	}
	if s.n < 0 || s.n > math.MaxInt32 {
		return fmt.Errorf("a state of %d positions", s.n)
	}
	if len(s.data) == 11 && len(s.data[5]) == 0 && len(s.data[6]) == 0 {
		// No previous block pending: its arrays are empty, and no head
		// may claim one.
		for _, p := range s.data[4] {
			if p != 0 {
				return errors.New("a state with a pending block but none saved")
			}
		}
		return s.checkArrays(sketchState, len(d.prefix), len(d.keys), len(d.vals), len(d.cm), len(d.pending), 0, 0,
			len(d.block), len(d.ref), len(d.bref), len(d.ks))
	}
	return s.checkArrays(sketchState, len(d.prefix), len(d.keys), len(d.vals), len(d.cm), len(d.pending), len(d.pm), len(d.pv),
		len(d.block), len(d.ref), len(d.bref), len(d.ks))
}

func (d *sketchDecoder) restore(s *State) {
	x := s.data
	copy(d.prefix, x[0])
	copy(d.keys, x[1])
	copy(d.vals, x[2])
	copy(d.cm, x[3])
	for i := range d.pending {
		d.pending[i] = x[4][i] != 0
	}
	copy(d.pm, x[5])
	copy(d.pv, x[6])
	copy(d.block, x[7])
	copy(d.ref, x[8])
	copy(d.bref, x[9])
	copy(d.ks, x[10])
	d.n = s.n
}
