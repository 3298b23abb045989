package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// refHyperOf is HyperAttention in float64, written from its definition
// (the doc of Hyper) for the random draws of m's last Forward: the LSH
// hyperplanes and the sampled key positions. Ranks, sorts, blocks, masks
// and log-weights are computed here afresh.
func refHyperOf(m Mechanism, causal bool, q, k, v *tensor.Tensor) []float64 {
	a := m.(*hyperAttn)
	cfg := a.cfg
	draws := a.SketchMatrices()
	P := draws["lsh"]
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	b, s, L := cfg.Block, cfg.Samples, cfg.MinLength
	nh := cfg.Hashes
	// rank: the index r of the bucket's bits in the Gray sequence r^(r>>1).
	rankOf := func(x []float64) int {
		code := 0
		for u := range nh {
			var d float64
			for c := range h {
				d += x[c] * float64(P.Data[c*nh+u])
			}
			if d > 0 {
				code |= 1 << u
			}
		}
		for r := range 1 << nh {
			if r^(r>>1) == code {
				return r
			}
		}
		panic("no rank")
	}
	out := make([]float64, len(q.Data))
	for bh := range B * H {
		row := func(x *tensor.Tensor, i int) []float64 {
			r := make([]float64, h)
			for c := range h {
				r[c] = float64(x.Data[(bh*N+i)*h+c])
			}
			return r
		}
		qs, ks, vs := make([][]float64, N), make([][]float64, N), make([][]float64, N)
		rq, rk := make([]int, N), make([]int, N)
		for i := range N {
			qs[i], ks[i], vs[i] = row(q, i), row(k, i), row(v, i)
			rq[i], rk[i] = rankOf(qs[i]), rankOf(ks[i])
		}
		vnorm2 := func(j int) float64 { return dotF64(vs[j], vs[j]) }
		// sample returns the sampled keys of a set and their log-weights
		// over `past` keys.
		sample := func(set, past int) (js []int, lws []float64) {
			t := draws["samples"]
			if t == nil || s == 0 || past == 0 {
				return nil, nil
			}
			var z float64
			for j := range past {
				z += vnorm2(j)
			}
			sets := t.Shape[2]
			for u := range s {
				j := int(t.Data[(bh*sets+set)*s+u])
				js = append(js, j)
				if cfg.Sampling == SampleVNorm && z > 0 {
					lws = append(lws, math.Log(z/(float64(s)*vnorm2(j))))
				} else {
					lws = append(lws, math.Log(float64(past)/float64(s)))
				}
			}
			return js, lws
		}
		// sorted returns positions 0…n−1 sorted by (rank, position).
		sorted := func(ranks []int, n int) []int {
			idx := make([]int, n)
			for i := range idx {
				idx[i] = i
			}
			sort.SliceStable(idx, func(x, y int) bool { return ranks[idx[x]] < ranks[idx[y]] })
			return idx
		}
		type col struct {
			j  int
			lw float64
		}
		cols := make([][]col, N)
		switch {
		case !causal && N <= L:
			for i := range N {
				for j := range N {
					cols[i] = append(cols[i], col{j, 0})
				}
			}
		case !causal:
			sq, sk := sorted(rq, N), sorted(rk, N)
			blockOfKey := make([]int, N)
			for at, j := range sk {
				blockOfKey[j] = at / b
			}
			js, lws := sample(0, N)
			for at, i := range sq {
				t := at / b
				for _, j := range sk[t*b : min(t*b+b, N)] {
					cols[i] = append(cols[i], col{j, 0})
				}
				for u, j := range js {
					if blockOfKey[j] != t {
						cols[i] = append(cols[i], col{j, lws[u]})
					}
				}
			}
		default:
			for i := range N {
				c := i / b
				cb := c * b
				for j := cb; j <= i; j++ {
					cols[i] = append(cols[i], col{j, 0})
				}
				if cb < L {
					for j := range cb {
						cols[i] = append(cols[i], col{j, 0})
					}
					continue
				}
				if cb == 0 {
					continue
				}
				sk := sorted(rk, cb)
				var less, eq int
				for _, j := range sk {
					if rk[j] < rq[i] {
						less++
					} else if rk[j] == rq[i] {
						eq++
					}
				}
				kb := min((less+eq/2)/b, (cb+b-1)/b-1)
				blockOfKey := map[int]int{}
				for at, j := range sk {
					blockOfKey[j] = at / b
				}
				for _, j := range sk[kb*b : min(kb*b+b, cb)] {
					cols[i] = append(cols[i], col{j, 0})
				}
				js, lws := sample(c, cb)
				for u, j := range js {
					if blockOfKey[j] != kb {
						cols[i] = append(cols[i], col{j, lws[u]})
					}
				}
			}
		}
		scale := 1 / math.Sqrt(float64(h))
		for i := range N {
			mx := math.Inf(-1)
			logits := make([]float64, len(cols[i]))
			for x, c := range cols[i] {
				logits[x] = dotF64(qs[i], ks[c.j])*scale + c.lw
				mx = math.Max(mx, logits[x])
			}
			var den float64
			o := make([]float64, h)
			for x, c := range cols[i] {
				w := math.Exp(logits[x] - mx)
				den += w
				for d := range h {
					o[d] += w * vs[c.j][d]
				}
			}
			for d := range h {
				out[(bh*N+i)*h+d] = o[d] / den
			}
		}
	}
	return out
}

// newHyperTest builds HyperAttention from a spec.
func newHyperTest(t testing.TB, spec string, causal bool) *hyperAttn {
	t.Helper()
	cfg, err := ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, Setup{Causal: causal, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	return m.(*hyperAttn)
}

// hyperInputs returns q, k with rows normalized and scaled by h^-1/4 and
// v ~ N(0, 1), [B, H, N, h].
func hyperInputs(seed uint64, B, H, N, h int) (q, k, v *tensor.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 17))
	q, k, v = randTensor(rng, 1, B, H, N, h), randTensor(rng, 1, B, H, N, h), randTensor(rng, 1, B, H, N, h)
	normalizeRows(q, math.Pow(float64(h), -0.25))
	normalizeRows(k, math.Pow(float64(h), -0.25))
	return q, k, v
}

// hyperSpecs are small configurations in which every path runs: exact
// chunks, approximated ones, samples masked and not, several key blocks.
var hyperSpecs = []string{
	"hyper:block=8:samples=6:min-length=16:hashes=3",
	"hyper:block=8:samples=6:min-length=16:hashes=3:sampling=vnorm",
	"hyper:block=8:samples=0:min-length=0:hashes=4",
	"hyper:block=16:samples=20:min-length=64:hashes=7",
	"hyper:block=8:min-length=4096", // exact
}

func TestHyperReference(t *testing.T) {
	for _, spec := range hyperSpecs {
		for _, causal := range []bool{true, false} {
			for _, N := range []int{37, 130} {
				t.Run(fmt.Sprint(name(spec, causal), "/N=", N), func(t *testing.T) {
					m := newHyperTest(t, spec, causal)
					q, k, v := hyperInputs(1, 2, 2, N, 8)
					o := forward(m, q, k, v)
					want := refHyperOf(m, causal, q, k, v)
					var d, s float64
					for i := range want {
						d = math.Max(d, math.Abs(float64(o.Data[i])-want[i]))
						s = math.Max(s, math.Abs(want[i]))
					}
					if !(d/s <= 1e-5) {
						t.Errorf("max |o − reference| / max |reference| = %.3g", d/s)
					}
				})
			}
		}
	}
}

// TestHyperExactBelowMinLength: with N ≤ MinLength the output is exact
// softmax attention.
func TestHyperExactBelowMinLength(t *testing.T) {
	for _, causal := range []bool{true, false} {
		m := newHyperTest(t, "hyper:block=8:min-length=64", causal)
		q, k, v := hyperInputs(2, 1, 2, 64, 8)
		got := forward(m, q, k, v)
		want := exactAttention(Softmax, causal, 0, q, k, v)
		if d := maxRelDiff(got.Data, want.Data); d > 1e-5 {
			t.Errorf("causal=%v: differs from exact softmax by %.3g", causal, d)
		}
	}
}

// relFrob returns ‖a − b‖ / ‖b‖.
func relFrob(a, b []float32) float64 {
	var d, n float64
	for i := range a {
		x := float64(a[i]) - float64(b[i])
		d += x * x
		n += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d / n)
}

// TestHyperErrorFalls requires the error against exact softmax attention
// to fall as the blocks and samples grow (the error is reported).
func TestHyperErrorFalls(t *testing.T) {
	const N, h = 1024, 16
	for _, causal := range []bool{false, true} {
		for _, sampling := range []string{SampleUniform, SampleVNorm} {
			var errs []float64
			for _, bs := range []int{16, 64, 256} {
				var e float64
				for seed := range uint64(2) {
					q, k, v := hyperInputs(10+seed, 1, 2, N, h)
					// Sharper attention than unit rows give, as trained models have.
					for _, x := range []*tensor.Tensor{q, k} {
						for i := range x.Data {
							x.Data[i] *= 2
						}
					}
					m := newHyperTest(t, fmt.Sprintf("hyper:block=%d:samples=%d:min-length=0:sampling=%s", bs, bs, sampling), causal)
					e += relFrob(forward(m, q, k, v).Data, exactAttention(Softmax, causal, 0, q, k, v).Data) / 2
				}
				errs = append(errs, e)
			}
			t.Logf("causal=%v %s: relative error ‖o − softmax‖/‖softmax‖ for block = samples = 16, 64, 256: %.3g", causal, sampling, errs)
			for i := 1; i < len(errs); i++ {
				if !(errs[i] < errs[i-1]) {
					t.Errorf("causal=%v %s: error does not fall: %.3g", causal, sampling, errs)
				}
			}
		}
	}
}

// TestHyperGradients checks Backward against central finite differences
// of the approximation as computed: probes whose perturbation changes a
// hash bucket or a sampled column (the discrete choices, which the
// gradient holds fixed) are replaced by others.
func TestHyperGradients(t *testing.T) {
	for _, spec := range hyperSpecs {
		for _, causal := range []bool{true, false} {
			t.Run(name(spec, causal), func(t *testing.T) {
				m := newHyperTest(t, spec, causal)
				q, k, v := hyperInputs(3, 1, 2, 41, 8)
				checkHyperGradients(t, m, q, k, v, 1e-2, 2e-2, 8)
			})
		}
	}
}

func checkHyperGradients(t *testing.T, m *hyperAttn, q, k, v *tensor.Tensor, eps, tol float64, probes int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	w := randTensor(rng, 1, q.Shape...)
	choices := func() []int32 {
		return slices.Concat(m.rankQ, m.rankK, m.samp)
	}
	loss := func() (float64, []int32) {
		o := forward(m, q, k, v)
		var s float64
		for i := range o.Data {
			s += float64(o.Data[i]) * float64(w.Data[i])
		}
		return s, choices()
	}
	forward(m, q, k, v)
	base := choices()
	dq, dk, dv := tensor.New(q.Shape...), tensor.New(k.Shape...), tensor.New(v.Shape...)
	m.Backward(dq, dk, dv, w)
	for _, in := range []struct {
		name string
		x, g *tensor.Tensor
	}{{"q", q, dq}, {"k", k, dk}, {"v", v, dv}} {
		scale := rms(in.g.Data)
		done, skipped := 0, 0
		for done < probes {
			i := rng.IntN(len(in.x.Data))
			orig := in.x.Data[i]
			in.x.Data[i] = orig + float32(eps)
			up, c1 := loss()
			in.x.Data[i] = orig - float32(eps)
			down, c2 := loss()
			in.x.Data[i] = orig
			if !slices.Equal(c1, base) || !slices.Equal(c2, base) {
				if skipped++; skipped > probes {
					t.Fatalf("d%s: %d probes changed the hashes or samples", in.name, skipped)
				}
				continue
			}
			done++
			numeric := (up - down) / (2 * eps)
			analytic := float64(in.g.Data[i])
			if math.Abs(analytic-numeric) > tol*(math.Abs(numeric)+scale) {
				t.Errorf("d%s[%d] = %.6g, finite difference %.6g (gradient RMS %.3g)", in.name, i, analytic, numeric, scale)
			}
		}
	}
	forward(m, q, k, v) // leave m as the caller found it
}

// TestHyperCausal: outputs before a cut are bit-identical when everything
// after it changes, and do not depend on the sequence length.
func TestHyperCausal(t *testing.T) {
	for _, spec := range hyperSpecs {
		t.Run(spec, func(t *testing.T) {
			m := newHyperTest(t, spec, true)
			q, k, v := hyperInputs(4, 2, 2, 150, 8)
			checkCausal(t, m, q, k, v)
			full := forward(m, q, k, v)
			const n = 77
			cut := func(x *tensor.Tensor) *tensor.Tensor {
				y := tensor.New(2, 2, n, 8)
				for bh := range 4 {
					copy(y.Data[bh*n*8:(bh+1)*n*8], x.Data[bh*150*8:])
				}
				return y
			}
			short := forward(m, cut(q), cut(k), cut(v))
			if d := maxRelDiff(short.Data, cut(full).Data); d > 1e-6 {
				t.Errorf("the first %d outputs change by %.3g when the sequence is shortened to them", n, d)
			}
		})
	}
}

// TestHyperThreads requires bitwise identical outputs and gradients for
// GOMAXPROCS 1, 2 and 3 with the approximation active.
func TestHyperThreads(t *testing.T) {
	for _, spec := range hyperSpecs[:4] {
		for _, causal := range []bool{true, false} {
			t.Run(name(spec, causal), func(t *testing.T) {
				q, k, v := hyperInputs(5, 1, 3, 301, 8)
				checkThreads(t, func() Mechanism { return newHyperTest(t, spec, causal) }, q, k, v)
			})
		}
	}
}

func TestHyperAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, spec := range hyperSpecs {
		for _, causal := range []bool{true, false} {
			t.Run(name(spec, causal), func(t *testing.T) {
				withProcs(1, func() { checkNoAllocs(t, newHyperTest(t, spec, causal), 203, 8) })
			})
		}
	}
}

// TestHyperWorkspace requires Workspace to equal what a first
// Forward+Backward allocates, to within the small structures.
func TestHyperWorkspace(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	const B, H, N, h = 1, 2, 500, 16
	for _, spec := range hyperSpecs {
		for _, causal := range []bool{true, false} {
			t.Run(name(spec, causal), func(t *testing.T) {
				q, k, v := hyperInputs(6, B, H, N, h)
				checkWorkspace(t, func() Mechanism { return newHyperTest(t, spec, causal) }, q, k, v)
			})
		}
	}
}

// TestHyperDecoder: the decoder reproduces causal Forward, however the
// sequence is cut into steps.
func TestHyperDecoder(t *testing.T) {
	const N = 90
	for _, spec := range hyperSpecs {
		t.Run(spec, func(t *testing.T) {
			m := newHyperTest(t, spec, true)
			q, k, v := hyperInputs(7, 2, 2, N, 8)
			fwd := forward(m, q, k, v)
			d, err := NewDecoder(m, 2, 2, 8)
			if err != nil {
				t.Fatal(err)
			}
			for _, schedule := range [][]int{{1}, {3, 1, 17, 2}, {N}, {8}, {13}} {
				d.Reset()
				got := decodeChunks(t, d, q, k, v, schedule)
				if diff := maxRelDiff(got.Data, fwd.Data); diff > 1e-5 {
					t.Errorf("schedule %v: decoder differs from Forward by %.3g", schedule, diff)
				}
			}
		})
	}
	if _, err := NewDecoder(newHyperTest(t, "hyper", false), 1, 1, 8); err == nil {
		t.Error("a decoder of non-causal HyperAttention: no error")
	}
}

func TestHyperConfigErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"hyper:hashes=0", "hashes 0"},
		{"hyper:hashes=13", "hashes 13"},
		{"hyper:block=0", "block 0"},
		{"hyper:samples=-1", "samples -1"},
		{"hyper:min-length=-5", "min_length -5"},
		{"hyper:sampling=norm", `sampling "norm"`},
		{"hyper:degree=4", "degree is no option of hyper"},
	} {
		_, err := ParseSpec(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.spec, err, tc.want)
		}
	}
}

func TestGrayRank(t *testing.T) {
	// Consecutive ranks differ in one bit, and every code has a rank.
	const bits = 7
	code := make([]int, 1<<bits)
	for c := range code {
		code[grayRank(c)] = c
	}
	for r := 1; r < len(code); r++ {
		if d := code[r] ^ code[r-1]; d&(d-1) != 0 || d == 0 {
			t.Fatalf("ranks %d and %d: codes %b and %b differ in more than one bit", r-1, r, code[r-1], code[r])
		}
	}
}
