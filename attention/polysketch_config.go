package attention

import (
	"errors"

	"github.com/polysketch/polysketch/internal/field"
)

// PolysketchConfig configures PolySketch attention (see polysketch.go).
type PolysketchConfig struct {
	Degree     int        `json:"degree" help:"degree p of the approximated weights (q·k)^p: 2, 4 or 8"`
	SketchSize int        `json:"sketch_size" help:"sketch size r: r(r+1)/2 features per row"`
	Block      int        `json:"block" help:"rows per block of the lower-triangular multiply and of the local exact blocks"`
	Local      bool       `json:"local" help:"exact (q·k)^p inside each diagonal block"`
	Sketch     SketchKind `json:"sketch" help:"random sketch, or the initialization of a learned one: gaussian or srht"`
	Learned    bool       `json:"learned" help:"learned sketches (Algorithm 2): small networks trained with the model"`
	CumSum     bool       `json:"cumsum" help:"per-token cumulative sums instead of blocks (the slow baseline; no local blocks)"`
	Remat      bool       `json:"remat" help:"keep nothing per block for backward: recompute it"`
	// The options that fit polysketch to a softmax teacher (see
	// engine_mixed.go), and RawQK for a student of a teacher without a
	// LayerNorm on q and k.
	RawQK   bool `json:"raw_qk" help:"no LayerNorm on q and k: attention reads them as projected (as a softmax teacher's)"`
	Scale   bool `json:"scale" help:"a learned temperature per head on q and k, starting at h^-1/4 each (q·k/√h, softmax's scores)"`
	Softmax bool `json:"local_softmax" help:"the local blocks weigh by exp(q·k) (softmax) instead of (q·k)^p, under one normalizer with the sketched rest"`
	Mix     bool `json:"mix" help:"a learned weight per head on the sketched part, against the local blocks"`
}

// normalizeQK says whether the model puts its LayerNorm on q and k.
func (c PolysketchConfig) normalizeQK() bool { return !c.RawQK }

func (PolysketchConfig) Mechanism() string { return string(Polysketch) }

func (c PolysketchConfig) Validate() error {
	var errs []error
	if err := checkEvenDegree(c.Degree); err != nil {
		errs = append(errs, err)
	} else if c.Degree&(c.Degree-1) != 0 {
		errs = append(errs, field.Invalid("degree", c.Degree, "polysketch needs a power of two (2, 4, 8)"))
	}
	if c.SketchSize <= 0 {
		errs = append(errs, field.Invalid("sketch_size", c.SketchSize, "must be positive (32 or 64 are the paper's)"))
	}
	errs = append(errs, checkMax("sketch_size", c.SketchSize, maxSketchSize))
	switch c.Sketch {
	case Gaussian, SRHT:
	default:
		errs = append(errs, field.Invalid("sketch", c.Sketch, "use %q or %q", Gaussian, SRHT))
	}
	if (c.Softmax || c.Mix) && (!c.Local || c.CumSum) {
		errs = append(errs, field.Errorf("%s and %s weigh the local blocks against the rest: they need local blocks (%s) and the block algorithm (no %s)",
			field.Name("local_softmax"), field.Name("mix"), field.Name("local"), field.Name("cumsum")))
	}
	return errors.Join(append(errs, checkBlock(c.Block))...)
}

// options is c in the form the kernels take.
func (c PolysketchConfig) options(s Setup) kernelOptions {
	return kernelOptions{
		Causal: s.Causal, Seed: s.Seed, Degree: c.Degree, SketchSize: c.SketchSize, Block: c.Block,
		Local: c.Local, Sketch: c.Sketch, Learned: c.Learned, CumSum: c.CumSum, Remat: c.Remat,
		Heads: s.Heads, Scale: c.Scale, Softmax: c.Softmax, Mix: c.Mix,
	}
}

func init() {
	Register(Entry{
		Name: string(Polysketch), Order: 100, Cost: "O(N·(b + r²)·h)",
		Summary: "sketched polynomial attention: self-tensored random or learned sketches, block lower-triangular multiply, exact local blocks",
		Properties: Properties{
			Linear: true, NormalizeQK: true, Trainable: true, Recurrent: true,
		},
		Default: func() Config {
			return PolysketchConfig{Degree: 4, SketchSize: 32, Block: 256, Local: true, Sketch: Gaussian}
		},
		New: func(c Config, s Setup) (Mechanism, error) {
			return newPolysketch(c.(PolysketchConfig).options(s)), nil
		},
	})
}
