package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
)

// TestSnapshotResumes takes a snapshot of a sequence after a prefix fed
// in chunks and then one token at a time (mid-block, with a block still
// to fold), encodes and decodes it, restores it into a fresh sequence and
// into a used one, and requires the same logits as the original sequence,
// bit for bit, over the rest of the sequence in chunks and single tokens,
// for every mechanism whose decoder state can be copied.
func TestSnapshotResumes(t *testing.T) {
	for _, c := range testCases() {
		t.Run(c.name, func(t *testing.T) {
			m := mustNew(t, c.cfg)
			perturb(m, 4)
			V := c.cfg.Vocab
			rng := rand.New(rand.NewPCG(3, 3))
			tokens := randomTokens(rng, 30, V)
			orig, _ := m.NewSequence()
			b := m.NewBatch()
			feed := func(s *Sequence, ts []int32, chunks ...int) [][]float32 {
				var out [][]float32
				for at, k := 0, 0; at < len(ts); k++ {
					n := min(chunks[k%len(chunks)], len(ts)-at)
					logits, err := b.Step([]*Sequence{s}, [][]int32{ts[at : at+n]})
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, slices.Clone(logits.Data[:V]))
					at += n
				}
				return out
			}
			feed(orig, tokens[:13], 4, 4, 1, 1, 1, 1, 1) // 8 in chunks, then 5 single: mid-block
			snap, err := orig.Snapshot()
			if strings.HasPrefix(c.name, "hyper") {
				if err == nil {
					t.Fatal("a snapshot of HyperAttention's decoder, which has no state to save")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := snap.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			var back Snapshot
			if err := back.UnmarshalBinary(data); err != nil {
				t.Fatal(err)
			}
			if back.Len() != 13 || back.Bytes() != snap.Bytes() || back.Bytes() <= 0 {
				t.Fatalf("decoded snapshot at %d of %d bytes, want 13 and %d", back.Len(), back.Bytes(), snap.Bytes())
			}
			want := feed(orig, tokens[13:], 3, 1, 5)

			fresh, _ := m.NewSequence()
			used, _ := m.NewSequence()
			feed(used, tokens[5:25], 7, 1) // other state, to be overwritten entirely
			for name, s := range map[string]*Sequence{"fresh": fresh, "used": used} {
				if err := s.Restore(&back); err != nil {
					t.Fatal(err)
				}
				if s.Len() != 13 {
					t.Fatalf("%s: restored to position %d, want 13", name, s.Len())
				}
				got := feed(s, tokens[13:], 3, 1, 5)
				for i := range want {
					for j := range want[i] {
						if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
							t.Fatalf("%s: chunk %d after the restore, logit %d: %v, want %v bit for bit", name, i, j, got[i][j], want[i][j])
						}
					}
				}
			}
		})
	}
}

// TestSnapshotRefused checks that a snapshot is refused, leaving the
// sequence as it was, by a model of another shape or mechanism, and that
// damaged encodings are refused without allocating what they claim.
func TestSnapshotRefused(t *testing.T) {
	m := mustNew(t, tiny("polysketch"))
	s, _ := m.NewSequence()
	b := m.NewBatch()
	if _, err := b.Step([]*Sequence{s}, [][]int32{{1, 2, 3, 4, 5}}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []Config{tiny("softmax"), with(tiny("polysketch"), func(c *attention.PolysketchConfig) { c.Block = 5 }), func() Config { c := tiny("polysketch"); c.Layers = 3; return c }()} {
		o := mustNew(t, other)
		seq, _ := o.NewSequence()
		if err := seq.Restore(snap); err == nil {
			t.Errorf("a polysketch snapshot restored into a model of %s with %d layers", other.Attention, other.Layers)
		} else if seq.Len() != 0 {
			t.Errorf("a refused restore moved the sequence to %d", seq.Len())
		}
	}
	data, _ := snap.MarshalBinary()
	for name, bad := range map[string][]byte{
		"truncated":      data[:len(data)-3],
		"trailing":       append(slices.Clone(data), 0),
		"huge layers":    append(slices.Clone(data[:8]), 0xff, 0xff, 0xff, 0x7f),
		"huge array":     append(slices.Clone(data[:8+4+13]), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f),
		"empty":          nil,
		"huge positions": append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, data[8:]...),
	} {
		var p Snapshot
		if err := p.UnmarshalBinary(bad); err == nil {
			t.Errorf("%s: a damaged snapshot was decoded", name)
		}
	}
}
