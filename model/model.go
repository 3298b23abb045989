// Package model is the decoder-only Transformer++ of PolySketchFormer
// (Kacham, Mirrokni and Zhong, Appendix I): its configuration, parameters,
// forward and backward passes, and the state for generating one token at a
// time. The same blocks, configured otherwise, are the architectures of
// imported models (package hf): RMSNorm, SwiGLU or GPT-2's GELU MLP,
// grouped-query attention, biases per projection, rotary embeddings
// alone at any base with Llama 3 or linear scaling, or learned positions
// (see Config).
//
// For tokens x of shape [B,N] the model computes
//
//	h = √d·E[x] + PE                          token embedding, sinusoidal positions
//	for each layer:
//	    a = LN₁(h);  q, k, v = a·W_qkv        split into H heads of h = d/H
//	    q, k = LN_qk(q), LN_qk(k)             polynomial and polysketch only (Sec. 2.1)
//	    q, k = RoPE(q), RoPE(k)               in every head
//	    h = h + Attention(q, k, v)·W_o        causal; one mechanism per layer
//	    h = h + GLU(LN₂(h))                   (GELU(a·W₁) ⊙ a·W₃)·W₂, hidden 4·d
//	logits = LN(h)·Eᵀ/√d + c                  tied; or LN(h)·W_out + c
//
// By default linear maps have no biases (as in the paper's reference
// code); every LayerNorm has a gain and a bias, and the q/k LayerNorm of a layer is one
// set of parameters over the h features of every head, applied to q and to
// k alike, as the paper's derivation (the same rescaling and bias for q and
// k) and its reference code have it. The input embedding is scaled by √d
// (Vaswani et al.) so that tokens are not drowned by the unit-size
// position embedding; with tied embeddings the logits are scaled back by
// 1/√d (as T5 does), or the untrained model would predict the current
// token with a logit of about √d and start far above the uniform loss.
// Each layer's sketch has its own seed derived from Config.Seed and the
// layer index.
//
// Training uses Loss and Backward:
//
//	m, err := model.New(cfg)
//	loss := m.Loss(inputs, targets, B, N) // forward and mean cross-entropy
//	m.Backward()                          // accumulates into every Param's Grad
//	// optimizer step on m.Params(), then zero the gradients
//
// With Config.Bidirectional the same blocks make an encoder (the thesis's
// §1.2.1 model, for sequence-to-sequence tasks of equal length such as
// reversal): attention without a mask, and logits at position i that
// classify position i (train it with the targets aligned to the inputs);
// Config.PostNorm and Config.Positions give it the thesis's post-LayerNorm
// and learned or sinusoidal positions.
//
// Generation uses a Decoder (see Model.NewDecoder), which consumes one
// token per sequence per step and returns the next token's logits.
//
// A Model sizes its buffers for the batch shape on first use and reuses
// them, so that steps of one shape do not allocate beyond goroutine
// bookkeeping. All parallel work splits outputs, never sums, so losses and
// gradients are bitwise identical for any GOMAXPROCS. A Model is not safe
// for concurrent use.
package model

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// Model is a decoder-only Transformer++ with its parameters, gradients and
// the activations of the last forward pass.
type Model struct {
	cfg      Config
	embed    *nn.Embedding
	embScale float32        // Config.EmbedScale, √Dim by default
	pos      *nn.Sinusoidal // nil unless sinusoidal embeddings are added
	rope     *nn.RoPE       // nil unless q and k are turned
	posTable *nn.Embedding  // learned positions, [Context, d]; nil otherwise
	posIDs   []int32        // the position of every row, for posTable
	layers   []*layer
	norm     normalizer
	head     *nn.Linear // untied output projection; nil when tied
	bias     *nn.Param  // logits bias c (head.Bias when untied); nil with NoHeadBias
	params   []*nn.Param
	ce       nn.CrossEntropy

	precision nn.Precision // of the dense products (precision.go)
	released  bool         // ReleaseFP32 dropped the float32 dense weights

	// Activations and scratch of the current batch shape, shared by the
	// layers; what a layer must keep for Backward lives in the layer.
	batch, length int           // the shape the buffers are sized for
	tokens        []int32       // copy of the last Forward's tokens
	x             tensor.Tensor // [B,N,d] residual stream; Backward: its gradient (no layer keeps x)
	y             tensor.Tensor // [B,N,d] sublayer output; Backward: sublayer input gradients
	qkv           tensor.Tensor // [B,N,(H+2·KVH)·h] projections; Backward: their gradient
	o             tensor.Tensor // [B,H,N,h] attention output; Backward: its gradient
	dq, dk        tensor.Tensor // [B,H,N,h] (k and v repeated for their groups)
	dv            tensor.Tensor // [B,H,N,h]
	final         tensor.Tensor // [B,N,d] output of the final LayerNorm
	logits        tensor.Tensor // [B,N,V]; after Loss, the gradient of the loss
	haveGrad      bool          // Loss ran, so Backward may

	// Tap, if not nil, is called by Forward after the attention of each
	// layer i with its projections qkv ([B,N,q+2·kv], q, k and v side by
	// side as the layer's product made them) and the attention output o
	// ([B,H,N,h], before the output projection): a teacher's activations
	// for attention transfer (see AttentionForward). Both are the model's
	// buffers: copy what you keep.
	Tap func(i int, qkv, o *tensor.Tensor)

	// LayerDone, if not nil, is called by Backward as soon as the
	// gradients of layer i's parameters are final (layers in reverse
	// order), so that data-parallel training can send them while the
	// rest of the backward pass runs.
	LayerDone func(i int)
}

// New returns a model with freshly initialized parameters, drawn from
// cfg.Seed: the same Config gives the same weights. Linear weights are
// N(0, 1/fan-in), except the two projections into the residual stream of
// each layer (attention output and feed-forward output), scaled down by
// √(2·Layers) as in GPT-2, so that the stream does not grow with depth;
// embeddings are N(0, 1/d); norm gains start at 1, biases at 0.
func New(cfg Config) (*Model, error) {
	return build(cfg, rand.New(rand.NewPCG(cfg.Seed, 0x5472616e73666f72))) // "Transfor"
}

// NewEmpty returns a model of cfg whose weight matrices and embeddings
// are zero (norm gains one, biases zero), for a caller that sets every
// parameter, as loading a checkpoint does: it skips the random draws of
// New, which take seconds for a model of 100M parameters. Attention's own
// random draws (sketches) are those of New.
func NewEmpty(cfg Config) (*Model, error) { return build(cfg, nil) }

// build returns a model of cfg whose weights are drawn from rng, or left
// zero for a nil rng.
func build(cfg Config, rng *rand.Rand) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	d, V, h, L := cfg.Dim, cfg.Vocab, cfg.HeadSize(), cfg.Layers
	H := cfg.Heads
	hidden := cfg.HiddenSize()
	m := &Model{
		cfg:      cfg,
		embed:    nn.NewEmbedding("embed", V, d, rng),
		embScale: cfg.embedScale(),
	}
	m.params = append(m.params, m.embed.Params()...)
	if cfg.sinusoidal() {
		m.pos = nn.NewSinusoidal(d)
	}
	if cfg.rotary() {
		m.rope = nn.NewRoPEFrequencies(cfg.RoPEFrequencies())
	}
	if cfg.positions() == PositionsLearned {
		// Entries of unit variance, as large as the sinusoids they replace
		// and as the √d-scaled token embedding's: at N(0, 1/d), as the
		// token table starts, positions would be drowned and take
		// hundreds of steps to matter.
		m.posTable = nn.NewEmbedding("pos", cfg.Context, d, rng)
		m.posTable.Weight.InitNormal(rng, 1)
		m.params = append(m.params, m.posTable.Params()...)
	}
	resid := 1 / math.Sqrt(2*float64(L))
	for i := range L {
		name := fmt.Sprintf("layers.%d", i)
		attn, err := attention.New(cfg.Attention, cfg.setup(i))
		if err != nil {
			return nil, fmt.Errorf("model layer %d: %w", i, err)
		}
		l := &layer{
			ln1:  newNorm(cfg, name+".ln1", d),
			qkv:  nn.NewLinear(name+".attn.qkv", d, cfg.QKVSize(), cfg.QKVBias, rng),
			attn: attn,
			out:  nn.NewLinear(name+".attn.out", H*h, d, cfg.OutBias, rng),
			ln2:  newNorm(cfg, name+".ln2", d),
			ffn:  newFFN(cfg, name+".ffn", rng),
			post: cfg.PostNorm,
		}
		_, ffnOut := ffnLinears(l.ffn)
		l.out.Weight.InitNormal(rng, resid/math.Sqrt(float64(H*h)))
		ffnOut.Weight.InitNormal(rng, resid/math.Sqrt(float64(hidden)))
		if cfg.Properties().NormalizeQK {
			l.qn = nn.NewLayerNorm(name+".attn.qknorm", h, nn.GainBias)
			l.kn = l.qn.Share()
		}
		if tr, ok := attn.(attention.Trainable); ok {
			for _, p := range tr.Params() {
				p.Name = name + ".attn." + p.Name // unique across layers
				l.sketch = append(l.sketch, p)
			}
		}
		m.layers = append(m.layers, l)
		m.params = append(m.params, l.params()...)
	}
	m.norm = newNorm(cfg, "norm", d)
	m.params = append(m.params, m.norm.Params()...)
	switch {
	case !cfg.Tied:
		m.head = nn.NewLinear("head", d, V, !cfg.NoHeadBias, rng)
		m.bias = m.head.Bias
		m.params = append(m.params, m.head.Weight)
	case !cfg.NoHeadBias:
		m.bias = nn.NewParam("head.bias", false, V)
	}
	if m.bias != nil {
		m.params = append(m.params, m.bias)
	}
	return m, nil
}

// SetStep tells the attention mechanisms the training step (see
// attention.Stepper): the training loop calls it before each step, and
// loading a checkpoint with the step it was saved at.
func (m *Model) SetStep(step int) {
	for _, l := range m.layers {
		if s, ok := l.attn.(attention.Stepper); ok {
			s.SetStep(step)
		}
	}
}

// Config returns the configuration the model was built with.
func (m *Model) Config() Config { return m.cfg }

// Params lists every parameter once, in a fixed order, with names unique
// within the model and stable across versions (checkpoints use them):
//
//	embed.weight                             [V,d]
//	pos.weight                               [Context,d]  learned positions only
//	layers.<i>.ln1.gain, layers.<i>.ln1.bias [d]     no bias with RMSNorm
//	layers.<i>.attn.qkv.weight               [d,(H+2·KVH)·h]  columns: q, k, v, each head by head
//	layers.<i>.attn.qkv.bias                 [(H+2·KVH)·h]    QKVBias only
//	layers.<i>.attn.qknorm.gain, .bias       [h]     polynomial and polysketch only
//	layers.<i>.attn.sketch.f<j>.…            learned sketches only: the networks of
//	                                                 Algorithm 2, named by the attention package
//	layers.<i>.attn.out.weight               [H·h,d]
//	layers.<i>.attn.out.bias                 [d]     OutBias only
//	layers.<i>.ln2.gain, layers.<i>.ln2.bias [d]     no bias with RMSNorm
//	layers.<i>.ffn.in.weight                 [d,2·hidden]  gate, then value (gelu: [d,hidden])
//	layers.<i>.ffn.in.bias                   [2·hidden]    FFNBias only (gelu: [hidden])
//	layers.<i>.ffn.out.weight                [hidden,d]
//	layers.<i>.ffn.out.bias                  [d]     FFNBias only
//	norm.gain, norm.bias                     [d]     no bias with RMSNorm
//	head.weight                              [d,V]   untied only
//	head.bias                                [V]     unless NoHeadBias
func (m *Model) Params() []*nn.Param { return m.params }

// Forward computes the logits, [B,N,V], of tokens ([B·N] ids in row-major
// [B,N] order, each in [0, Vocab)) predicting the token after each
// position. N must not exceed Config.Context; B and N may change from call
// to call (buffers are resized). The returned tensor belongs to the model
// and is overwritten by the next Forward (and by Loss); a bad shape or an
// id outside the vocabulary panics.
func (m *Model) Forward(tokens []int32, B, N int) *tensor.Tensor {
	if B < 1 || N < 1 || N > m.cfg.Context || len(tokens) != B*N {
		panic(fmt.Sprintf("model.Forward: %d tokens for B=%d, N=%d (want B·N tokens, 1 ≤ N ≤ Context=%d)", len(tokens), B, N, m.cfg.Context))
	}
	m.resize(B, N)
	m.tokens = append(m.tokens[:0], tokens...)
	m.haveGrad = false
	m.embed.Forward(&m.x, m.tokens)
	scale(m.embScale, m.x.Data)
	m.addPositions(B, N)
	for i, l := range m.layers {
		l.forward(m, i)
	}
	m.norm.Forward(&m.final, &m.x)
	if m.head != nil {
		m.head.Forward(&m.logits, &m.final)
	} else {
		m.embed.Logits(&m.logits, &m.final)
		scale(1/m.embScale, m.logits.Data)
		if m.bias != nil {
			addRows(m.logits.Data, m.bias.Value.Data)
		}
	}
	return &m.logits
}

// Loss runs Forward and returns the mean cross-entropy of the logits
// against targets ([B·N], the token following each input; a negative
// target is padding and ignored), keeping what Backward needs. It
// replaces the logits Forward returned with their gradient.
func (m *Model) Loss(tokens, targets []int32, B, N int) float64 {
	if len(targets) != B*N {
		panic(fmt.Sprintf("model.Loss: %d targets for B=%d, N=%d", len(targets), B, N))
	}
	logits := m.Forward(tokens, B, N)
	loss, _ := m.ce.Loss(logits, logits, targets)
	m.haveGrad = true
	return loss
}

// Distill is Loss with a distillation term: it runs Forward and returns
// the mean cross-entropy against targets and the mean KL divergence
// KL(softmax(teacher) ‖ softmax(logits)) over the same positions, teacher
// being another model's logits ([B,N,Vocab]) for the same tokens, keeping
// for Backward the gradient of ce + weight·kl (see nn.CrossEntropy.Distill).
func (m *Model) Distill(tokens, targets []int32, B, N int, teacher *tensor.Tensor, weight float64) (ce, kl float64) {
	if len(targets) != B*N {
		panic(fmt.Sprintf("model.Distill: %d targets for B=%d, N=%d", len(targets), B, N))
	}
	logits := m.Forward(tokens, B, N)
	ce, kl, _ = m.ce.Distill(logits, logits, teacher, targets, weight)
	m.haveGrad = true
	return ce, kl
}

// Backward adds the gradient of the last Loss (or Distill) with respect to every
// parameter to the parameter's Grad (accumulating, so that micro-batches
// sum up; zero the gradients once per optimizer step). It may be called
// once per Loss.
func (m *Model) Backward() {
	if !m.haveGrad {
		panic("model.Backward: no Loss to differentiate (call Loss first, once per Backward)")
	}
	m.haveGrad = false
	// m.logits holds dL/dlogits; m.y receives dL/dfinal.
	if m.head != nil {
		m.head.Backward(&m.y, &m.logits)
	} else {
		if m.bias != nil {
			addColSums(m.bias.Grad.Data, m.logits.Data, m.cfg.Vocab)
		}
		scale(1/m.embScale, m.logits.Data)
		m.embed.LogitsBackward(&m.y, &m.logits)
	}
	m.norm.Backward(&m.x, &m.y) // m.x becomes dL/dx
	for i := len(m.layers) - 1; i >= 0; i-- {
		m.layers[i].backward(m)
		if m.LayerDone != nil {
			m.LayerDone(i)
		}
	}
	if m.posTable != nil {
		m.posTable.Backward(&m.x) // x = emb + table[position]: the table's gradient is dx
	}
	scale(m.embScale, m.x.Data)
	m.embed.Backward(&m.x)
}

// addPositions adds the position embeddings to the B×N rows of m.x:
// sinusoidal, rows of the learned table, or none (rotary embeddings alone).
func (m *Model) addPositions(B, N int) {
	if m.pos != nil {
		m.pos.Forward(&m.x, &m.x)
		return
	}
	if m.posTable == nil {
		return
	}
	m.posIDs = m.posIDs[:0]
	for range B {
		for n := range N {
			m.posIDs = append(m.posIDs, int32(n))
		}
	}
	m.posTable.Forward(&m.y, m.posIDs) // m.y is free until the first layer
	add(m.x.Data, m.y.Data)
}

// resize sizes the shared and per-layer buffers for a batch of B×N.
func (m *Model) resize(B, N int) {
	if B == m.batch && N == m.length {
		return
	}
	d, H, h, V := m.cfg.Dim, m.cfg.Heads, m.cfg.HeadSize(), m.cfg.Vocab
	for _, t := range []*tensor.Tensor{&m.x, &m.y, &m.final} {
		t.Resize(B, N, d)
	}
	m.qkv.Resize(B, N, m.cfg.QKVSize())
	for _, t := range []*tensor.Tensor{&m.o, &m.dq, &m.dk, &m.dv} {
		t.Resize(B, H, N, h)
	}
	m.logits.Resize(B, N, V)
	for _, l := range m.layers {
		l.resize(B, N, d, H, h)
	}
	m.batch, m.length = B, N
}

// elementwise is the least number of floats worth a goroutine in the
// elementwise helpers below.
const elementwise = 1 << 15

// add sets dst += src, in parallel over chunks.
func add(dst, src []float32) {
	parallel.For((len(dst)+elementwise-1)/elementwise, func(c int) {
		lo, hi := c*elementwise, min((c+1)*elementwise, len(dst))
		vec.Add(dst[lo:hi], dst[lo:hi], src[lo:hi])
	})
}

// scale sets x *= s, in parallel over chunks; nothing for s = 1.
func scale(s float32, x []float32) {
	if s == 1 {
		return
	}
	parallel.For((len(x)+elementwise-1)/elementwise, func(c int) {
		vec.Scale(s, x[c*elementwise:min((c+1)*elementwise, len(x))])
	})
}

// addRows adds the vector b to every row of x, a matrix of len(b) columns.
func addRows(x, b []float32) {
	cols := len(b)
	rows := len(x) / cols
	per := max(1, elementwise/cols)
	parallel.For((rows+per-1)/per, func(c int) {
		for r := c * per; r < min((c+1)*per, rows); r++ {
			vec.Add(x[r*cols:(r+1)*cols], x[r*cols:(r+1)*cols], b)
		}
	})
}

// colStrip is the width of the column strips addColSums hands to
// goroutines.
const colStrip = 64

// addColSums adds the column sums of x (rows of cols) to g: the backward
// pass of addRows. Each strip of columns sums its rows in row order, so the
// result does not depend on the number of threads.
func addColSums(g, x []float32, cols int) {
	rows := len(x) / cols
	parallel.For((cols+colStrip-1)/colStrip, func(s int) {
		lo, hi := s*colStrip, min((s+1)*colStrip, cols)
		for r := 0; r < rows; r++ {
			vec.Add(g[lo:hi], g[lo:hi], x[r*cols+lo:r*cols+hi])
		}
	})
}
