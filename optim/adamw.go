package optim

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// Config holds the hyperparameters of AdamW other than the learning rate,
// which changes every step (see Schedule).
type Config struct {
	Beta1, Beta2 float64 // decay rates of the first and second moments
	Eps          float64 // added to √v̂ in the denominator
	WeightDecay  float64 // λ of the decoupled decay, for params with Decay
}

// DefaultConfig returns β1 = 0.95 and β2 = 0.98, the values the
// PolySketchFormer paper states for its Adam with weight decay, with
// ε = 1e-8 and λ = 0.1, which the paper does not state (common choices).
func DefaultConfig() Config {
	return Config{Beta1: 0.95, Beta2: 0.98, Eps: 1e-8, WeightDecay: 0.1}
}

// Validate reports a configuration AdamW cannot use.
func (c Config) Validate() error {
	switch {
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("adamw: beta1 %v outside [0, 1)", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("adamw: beta2 %v outside [0, 1)", c.Beta2)
	case !(c.Eps > 0):
		return fmt.Errorf("adamw: eps %v must be positive", c.Eps)
	case !(c.WeightDecay >= 0):
		return fmt.Errorf("adamw: weight decay %v must not be negative", c.WeightDecay)
	}
	return nil
}

// AdamW is Adam with decoupled weight decay (Loshchilov & Hutter, 2019) as
// PyTorch defines it. Update number t = Step+1 with learning rate lr does,
// for every element w of every parameter with gradient g:
//
//	m ← β1·m + (1−β1)·g
//	v ← β2·v + (1−β2)·g²
//	w ← w − lr·(m/(1−β1ᵗ)) / (√(v/(1−β2ᵗ)) + ε) − lr·λ·w   (the last term only if Decay)
//
// The moments are float32 tensors of the parameter's shape.
type AdamW struct {
	Config
	// Step is the number of updates taken. Checkpoints save it beside State
	// and restore it after LoadState; the bias correction depends on it.
	Step int

	params []*nn.Param
	m, v   []*tensor.Tensor
	chunks []chunk
}

// NewAdamW returns an optimizer for params with zero moments at step 0. It
// fails on an invalid configuration or a repeated or empty parameter name
// (names key the optimizer state).
func NewAdamW(params []*nn.Param, c Config) (*AdamW, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(params))
	o := &AdamW{Config: c, params: params, chunks: split(params)}
	for _, p := range params {
		if p.Name == "" {
			return nil, errors.New("adamw: parameter without a name")
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("adamw: parameter name %q used twice", p.Name)
		}
		seen[p.Name] = true
		o.m = append(o.m, tensor.New(p.Value.Shape...))
		o.v = append(o.v, tensor.New(p.Value.Shape...))
	}
	return o, nil
}

// Params returns the parameters the optimizer updates.
func (o *AdamW) Params() []*nn.Param { return o.params }

// Update takes one step with learning rate lr using the current gradients,
// and increments Step.
func (o *AdamW) Update(lr float64) {
	o.Step++
	t := float64(o.Step)
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	stepSize := float32(lr / (1 - math.Pow(o.Beta1, t)))
	invBias2 := float32(1 / math.Sqrt(1-math.Pow(o.Beta2, t)))
	eps, decay := float32(o.Eps), float32(lr*o.WeightDecay)
	parallel.For(len(o.chunks), func(i int) {
		c := o.chunks[i]
		p := o.params[c.p]
		w, g := p.Value.Data[c.lo:c.hi], p.Grad.Data[c.lo:c.hi]
		m, v := o.m[c.p].Data[c.lo:c.hi], o.v[c.p].Data[c.lo:c.hi]
		d := decay
		if !p.Decay {
			d = 0
		}
		vec.AdamW(w, g, m, v, b1, b2, stepSize, invBias2, eps, d)
	})
}

// State returns the moments keyed by parameter name plus ".m" and ".v".
// The tensors are the optimizer's own (not copies): save them before the
// next Update.
func (o *AdamW) State() map[string]*tensor.Tensor {
	s := make(map[string]*tensor.Tensor, 2*len(o.params))
	for i, p := range o.params {
		s[p.Name+".m"] = o.m[i]
		s[p.Name+".v"] = o.v[i]
	}
	return s
}

// LoadState takes moments saved by State as the optimizer's own: the
// tensors of state become its moments, not copies of them, so that a
// resumed run holds its moments once. It fails, changing nothing, if an
// entry is missing, has the wrong shape or a non-finite value, or names
// no parameter of this optimizer. Step is not part of the map; set it
// separately.
func (o *AdamW) LoadState(state map[string]*tensor.Tensor) error {
	want := o.State()
	for key, dst := range want {
		src, ok := state[key]
		if !ok {
			return fmt.Errorf("adamw: optimizer state has no entry %q", key)
		}
		if !tensor.SameShape(src, dst) {
			return fmt.Errorf("adamw: optimizer state %q has shape %v, parameter needs %v", key, src.Shape, dst.Shape)
		}
		if err := src.CheckFinite("adamw: optimizer state " + key); err != nil {
			return err
		}
	}
	var extra []string
	for key := range state {
		if _, ok := want[key]; !ok {
			extra = append(extra, key)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Errorf("adamw: optimizer state has entries for unknown parameters: %q", extra)
	}
	for i, p := range o.params {
		o.m[i], o.v[i] = state[p.Name+".m"], state[p.Name+".v"]
	}
	return nil
}
