// Package attention implements the attention mechanisms of polysketch, each
// with its forward and backward pass: the softmax reference, FlashAttention,
// exact polynomial attention, and PolySketch attention (random sketches made
// non-negative by self-tensoring, the block lower-triangular multiply, and
// exact polynomial attention inside local blocks).
//
// Every mechanism takes Q, K, V of shape [B,H,N,h] and returns O of the same
// shape. Causal mechanisms never let position i see positions after i.
package attention

import (
	"errors"
	"fmt"

	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// Kind names a mechanism.
type Kind string

const (
	Softmax    Kind = "softmax"    // textbook softmax(QKᵀ/√h)V; materializes N×N, for tests and small N
	Flash      Kind = "flash"      // tiled online-softmax (FlashAttention-2), O(N) memory
	Polynomial Kind = "polynomial" // exact (q·k)^p / (1 + Σ (q·k')^p), tiled, O(N) memory
	Polysketch Kind = "polysketch" // sketched polynomial attention, linear in N
)

// SketchKind names the random sketch behind polysketch features.
type SketchKind string

const (
	Gaussian SketchKind = "gaussian" // Algorithm 1 of PolySketchFormer: Gaussian projections, √(1/r) per level
	SRHT     SketchKind = "srht"     // subsampled randomized Hadamard transform (TensorSRHT)
)

// kernelOptions is the union of the built-in kernels' settings, the form
// their constructors take; users configure a mechanism with its own Config
// type (PolysketchConfig, FlashConfig, …) through New.
type kernelOptions struct {
	Causal     bool       // mask future positions
	Degree     int        // p, even and ≥ 2 (polynomial, polysketch); powers of two for polysketch
	SketchSize int        // r, columns of the degree-p/2 sketch (polysketch)
	Block      int        // b, rows per block of the lower-triangular multiply and local attention; also flash's tile
	Local      bool       // exact (q·k)^p inside diagonal blocks (polysketch)
	Sketch     SketchKind // which random sketch (polysketch), or the initialization of a learned one
	Learned    bool       // learned sketches: each projection a small trained network (polysketch)
	CumSum     bool       // per-token cumulative sums instead of the block algorithm (polysketch baseline; implies !Local)
	Remat      bool       // keep nothing per block for backward; recompute it ("checkpoint attention")
	Seed       uint64     // seed of the random sketch
	Heads      int        // H, heads per sequence: the per-head parameters of Scale and Mix (0: from the first Forward)

	// The pieces that fit a linear mechanism to a softmax teacher (see
	// engine_mixed.go); each needs the engine's blocks (no CumSum), Softmax
	// and Mix also Local.
	Softmax bool // the local exact blocks weigh by exp(q·k) instead of (q·k)^p, under one normalizer with the rest
	Mix     bool // a learned per-head weight e^β on the feature weights outside the local blocks
	Scale   bool // a learned per-head temperature e^s on q and k
}

// defaultKernelOptions returns the settings of the paper's main experiments:
// causal, degree 4, r = 32, b = 256, local exact blocks, Gaussian sketch.
func defaultKernelOptions() kernelOptions {
	return kernelOptions{Causal: true, Degree: 4, SketchSize: 32, Block: 256, Local: true, Sketch: Gaussian, Seed: 1}
}

// Mechanism is one attention mechanism. Forward remembers its inputs (by
// reference: do not modify q, k, v before Backward) and whatever it saved
// for the backward pass. A Mechanism is not safe for concurrent use; it
// parallelizes internally over batch, heads and blocks.
type Mechanism interface {
	// Forward computes o = Attention(q, k, v); all four are [B,H,N,h].
	Forward(o, q, k, v *tensor.Tensor)
	// Backward computes the gradients dq, dk, dv (overwritten, not
	// accumulated) of the last Forward from the output gradient do.
	Backward(dq, dk, dv, do *tensor.Tensor)
	// Kind names the mechanism.
	Kind() Kind
	// Workspace returns the bytes Forward and Backward together keep or
	// allocate for inputs of shape [B,H,N,h], beyond q, k, v, o and their
	// gradients. Benchmarks use it to report a size as out of memory
	// before trying it, as the paper does.
	Workspace(B, H, N, h int) int64
}

// Trainable is implemented by mechanisms that own parameters (learned
// sketches). Backward accumulates (+=) into their gradients, as the nn
// layers do, and the model lists them with its own parameters.
type Trainable interface {
	Params() []*nn.Param
}

// Rounder is implemented by mechanisms with dense layers of their own
// (the networks of learned sketches), whose products follow the model's
// precision: SetPrecision switches them to bf16 or back (see
// nn.Precision), making bf16 copies of their weights, and RoundWeights
// makes the copies again after the weights changed. The learned
// networks' products, and the state products of their mechanism's
// backward pass, are the only ones of attention that bf16 changes (see
// docs/bf16.md).
type Rounder interface {
	SetPrecision(p nn.Precision)
	RoundWeights()
}

// Stepper is implemented by mechanisms whose random draws change during
// training (Performer's features, redrawn every so many steps): the
// training loop tells them the optimizer step before each one, and a
// loaded model the step it was saved at, so that a resumed run draws what
// the uninterrupted one drew. The draws depend on the seed and the step
// only, never on the data.
type Stepper interface {
	SetStep(step int)
}

// Sketched is implemented by mechanisms built on random sketch matrices, so
// that other implementations can reproduce their output exactly.
type Sketched interface {
	// SketchMatrices returns the matrices of the sketch by name, in the
	// order Algorithm 1 applies them: "g1", "g2", … (each [h,r] at the
	// first level, [r,r] above it). For degree 4 the features are
	// φ(x) = (((x·g1) ∗ (x·g2))/√r)^⊗2. Valid after the first Forward.
	SketchMatrices() map[string]*tensor.Tensor
}

// Decoder runs a causal mechanism incrementally, for generation: a chunk
// of positions at a time (a prompt) or one (each generated token). Its
// outputs equal, to float tolerance, those of Forward over the whole
// sequence, however the sequence is cut into chunks. Polysketch keeps a
// recurrent state of constant size, so every position costs the same
// whatever its index; the others keep a KV cache.
type Decoder interface {
	// Step consumes q, k, v of the next n ≥ 1 positions, each [B,H,n,h]
	// (or [B,H,h] for n = 1), and writes their outputs to o, of the same
	// shape. Position t of the chunk sees every position consumed before
	// and positions 0…t of the chunk, so one Step of n positions equals n
	// Steps of one; it runs them as matrix products.
	Step(o, q, k, v *tensor.Tensor)
	// Len is the number of positions consumed since the last Reset.
	Len() int
	// Reset forgets every position, keeping buffers for reuse.
	Reset()
}

// newMechanism returns the built-in mechanism of the given kind from the
// union of options, after validating them: the tests' way to reach the
// kernels with settings the registry's configs also describe.
func newMechanism(kind Kind, opts kernelOptions) (Mechanism, error) {
	if err := opts.validate(kind); err != nil {
		return nil, err
	}
	switch kind {
	case Softmax:
		return newSoftmax(opts), nil
	case Flash:
		return newFlash(opts), nil
	case Polynomial:
		return newPolynomial(opts), nil
	case Polysketch:
		return newPolysketch(opts), nil
	}
	return nil, fmt.Errorf("unknown attention mechanism %q", kind)
}

func (o kernelOptions) validate(kind Kind) error {
	switch kind {
	case Softmax:
		return nil
	case Flash:
		return FlashConfig{Block: o.Block}.Validate()
	case Polynomial:
		return PolynomialConfig{Degree: o.Degree, Block: o.Block}.Validate()
	}
	return PolysketchConfig{Degree: o.Degree, SketchSize: o.SketchSize, Block: o.Block, Sketch: o.Sketch}.Validate()
}

// checkBlock validates a block or tile size.
func checkBlock(b int) error {
	if b <= 0 {
		return field.Invalid("block", b, "must be positive")
	}
	return checkMax("block", b, maxBlock)
}

// Upper bounds of the options whose values size buffers, so that a
// damaged or crafted config.json is refused in one line instead of
// allocating without end. Each lies far above any useful value.
const (
	maxBlock      = 1 << 16
	maxSketchSize = 1024    // polysketch's features are its square
	maxFeatures   = 1 << 16 // Performer's random features
	maxSamples    = 1 << 20 // HyperAttention's sampled columns
	maxDegree     = 64      // of polynomial weights
)

// checkMax refuses a value v of option name above max.
func checkMax(name string, v, max int) error {
	if v > max {
		return field.Invalid(name, v, "at most %d", max)
	}
	return nil
}

// checkEvenDegree validates the degree of polynomial weights.
func checkEvenDegree(p int) error {
	if p < 2 || p%2 != 0 {
		return field.Invalid("degree", p, "polynomial weights need an even degree ≥ 2 (2, 4, 8)")
	}
	return checkMax("degree", p, maxDegree)
}

// Check validates user-supplied q, k, v: equal [B,H,N,h] shapes and finite
// values. Mechanisms panic on bad shapes (a programming error); data from
// users goes through Check first.
func Check(q, k, v *tensor.Tensor) error {
	if q.Dims() != 4 {
		return fmt.Errorf("q has shape %v: want [B,H,N,h]", q.Shape)
	}
	if !tensor.SameShape(q, k) || !tensor.SameShape(q, v) {
		return fmt.Errorf("q %v, k %v, v %v: shapes must be equal", q.Shape, k.Shape, v.Shape)
	}
	return errors.Join(q.CheckFinite("q"), k.CheckFinite("k"), v.CheckFinite("v"))
}

// mustMatch panics unless every tensor has the shape of the first.
func mustMatch(op string, ts ...*tensor.Tensor) {
	if ts[0].Dims() != 4 {
		panic(fmt.Sprintf("attention.%s: shape %v, want [B,H,N,h]", op, ts[0].Shape))
	}
	for _, t := range ts[1:] {
		if !tensor.SameShape(ts[0], t) {
			panic(fmt.Sprintf("attention.%s: shapes %v and %v differ", op, ts[0].Shape, t.Shape))
		}
	}
}
