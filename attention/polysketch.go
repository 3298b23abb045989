package attention

// PolySketch attention (Kind Polysketch) is the engine (engine.go) with
// polynomial weights of degree p approximated as
// w_ij = φ(q_i)·φ(k_j) ≥ 0, where φ(x) = M(x)^⊗2 self-tensors the
// degree-p/2 random sketch M of Algorithm 1 (see sketch), or with
// Learned (and degree ≥ 4) the learned sketch of Algorithm 2
// (sketch_learned.go). Outputs are
//
//	o_i = Σ_{j≤i} w_ij v_j / (1 + Σ_{j≤i} w_ij),
//
// with the exact (q_i·k_j)^p inside diagonal blocks when Local. The
// options Scale, Softmax and Mix, which fit it to a softmax teacher,
// change the weights as engine_mixed.go says.

// polysketchMap is the feature map of polysketch: the sketch of degree
// p/2 (random, or learned when o.Sketch is learnedSketch), then symmetric
// self-tensoring; the denominators' 1 goes with causal softmax local
// blocks, whose window always weighs i itself (see engine_mixed.go).
func polysketchMap(o kernelOptions) featureMap {
	one := float32(1)
	if o.Softmax && o.Causal {
		one = 0
	}
	return featureMap{
		project: func(h int, seed uint64) projection {
			return newSketch(o.Sketch, o.Degree/2, h, o.SketchSize, seed)
		},
		lift: tensored{},
		one:  one,
	}
}

func newPolysketch(o kernelOptions) Mechanism {
	if o.Learned {
		o.Sketch = learnedSketch // so that every newSketch builds the networks, the decoder's too
	}
	return newEngine(Polysketch, o, polysketchMap(o))
}
