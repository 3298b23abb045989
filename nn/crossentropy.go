package nn

import (
	"fmt"
	"math"

	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// CrossEntropy is the softmax cross-entropy loss of logits against integer
// targets, fused with its gradient as in llm.c. The zero value is ready to
// use; it keeps scratch buffers between calls.
type CrossEntropy struct {
	rowLoss []float64
	scratch []float32 // one row per goroutine, when no gradient is wanted
	ones    []float32 // [V] of 1, to subtract the maximum with vec.Axpy
}

// Loss returns the mean, over the rows whose target is not negative, of
// −log softmax(logits[r])[targets[r]], and the number n of those rows.
// logits has shape [..., V] with len(targets) rows; a negative target marks
// a padding row that is ignored. A target ≥ V panics. If all rows are
// ignored the loss is 0.
//
// If dlogits is not nil, Loss writes the gradient of the mean loss into it:
// (softmax(logits[r]) − onehot(targets[r]))/n, and zero on ignored rows.
// dlogits may be logits itself, saving a second [rows, V] buffer.
//
// Every row is computed as log Σ exp(l − max l) − (l_t − max l), which
// neither overflows nor loses a tiny target probability, and the row losses
// are summed in float64 in row order.
func (c *CrossEntropy) Loss(dlogits, logits *tensor.Tensor, targets []int32) (loss float64, n int) {
	if logits.Dims() == 0 {
		panic(fmt.Sprintf("nn.CrossEntropy.Loss: logits of shape %v", logits.Shape))
	}
	V := logits.Dim(-1)
	rows := rowsOf("CrossEntropy.Loss", "logits", logits, V)
	if len(targets) != rows {
		panic(fmt.Sprintf("nn.CrossEntropy.Loss: %d targets for logits of shape %v", len(targets), logits.Shape))
	}
	if dlogits != nil {
		checkRows("CrossEntropy.Loss", "dlogits", dlogits, rows, V)
	}
	for i, t := range targets {
		if int(t) >= V {
			panic(fmt.Sprintf("nn.CrossEntropy.Loss: target %d at row %d outside vocabulary of %d", t, i, V))
		}
		if t >= 0 {
			n++
		}
	}
	if n == 0 {
		if dlogits != nil {
			dlogits.Zero()
		}
		return 0, 0
	}
	if cap(c.rowLoss) < rows {
		c.rowLoss = make([]float64, rows)
	}
	c.rowLoss = c.rowLoss[:rows]
	workers := chunks(rows, V)
	if dlogits == nil {
		c.scratch = tensor.Grow(c.scratch, workers*V)
	}
	c.ones = ones(c.ones, V)
	invN := 1 / float32(n)
	splitRows(workers, rows, func(ch, lo, hi int) {
		for r := lo; r < hi; r++ {
			l := logits.Data[r*V : (r+1)*V]
			var p []float32
			if dlogits != nil {
				p = dlogits.Data[r*V : (r+1)*V]
			} else {
				p = c.scratch[ch*V : (ch+1)*V]
			}
			t := targets[r]
			if t < 0 {
				c.rowLoss[r] = 0
				if dlogits != nil {
					clear(p)
				}
				continue
			}
			m, lt := vec.Max(l), l[t] // read before p (maybe l) is overwritten
			if &p[0] != &l[0] {
				copy(p, l)
			}
			vec.Axpy(-m, c.ones, p) // l − max l
			vec.Exp(p, p)
			s := vec.Sum(p)
			c.rowLoss[r] = math.Log(float64(s)) - (float64(lt) - float64(m))
			if dlogits != nil {
				vec.Scale(invN/s, p)
				p[t] -= invN
			}
		}
	})
	for _, v := range c.rowLoss {
		loss += v
	}
	return loss / float64(n), n
}

// Distill is Loss with a distillation term: it returns, over the rows
// whose target is not negative, the mean cross-entropy ce of logits
// against targets and the mean KL divergence
//
//	kl = KL(softmax(teacher[r]) ‖ softmax(logits[r]))
//
// toward another model's logits on the same rows (teacher, of logits'
// shape), and n. If dlogits is not nil (it may be logits itself) it
// receives the gradient of ce + weight·kl:
// ((1+weight)·softmax(logits[r]) − onehot(targets[r]) − weight·softmax(teacher[r]))/n,
// and zero on ignored rows. Rows are computed as Loss computes them, and
// summed in float64 in row order.
func (c *CrossEntropy) Distill(dlogits, logits, teacher *tensor.Tensor, targets []int32, weight float64) (ce, kl float64, n int) {
	V := logits.Dim(-1)
	rows := rowsOf("CrossEntropy.Distill", "logits", logits, V)
	checkRows("CrossEntropy.Distill", "teacher", teacher, rows, V)
	if len(targets) != rows {
		panic(fmt.Sprintf("nn.CrossEntropy.Distill: %d targets for logits of shape %v", len(targets), logits.Shape))
	}
	if dlogits != nil {
		checkRows("CrossEntropy.Distill", "dlogits", dlogits, rows, V)
	}
	for i, t := range targets {
		if int(t) >= V {
			panic(fmt.Sprintf("nn.CrossEntropy.Distill: target %d at row %d outside vocabulary of %d", t, i, V))
		}
		if t >= 0 {
			n++
		}
	}
	if n == 0 {
		if dlogits != nil {
			dlogits.Zero()
		}
		return 0, 0, 0
	}
	if cap(c.rowLoss) < 2*rows {
		c.rowLoss = make([]float64, 2*rows)
	}
	rowCE, rowKL := c.rowLoss[:rows], c.rowLoss[rows:2*rows]
	workers := chunks(rows, V)
	c.scratch = tensor.Grow(c.scratch, 2*workers*V)
	c.ones = ones(c.ones, V)
	invN, w := 1/float32(n), float32(weight)
	splitRows(workers, rows, func(ch, lo, hi int) {
		p, pt := c.scratch[2*ch*V:(2*ch+1)*V], c.scratch[(2*ch+1)*V:(2*ch+2)*V]
		for r := lo; r < hi; r++ {
			l, u := logits.Data[r*V:(r+1)*V], teacher.Data[r*V:(r+1)*V]
			t := targets[r]
			if t < 0 {
				rowCE[r], rowKL[r] = 0, 0
				if dlogits != nil {
					clear(dlogits.Data[r*V : (r+1)*V])
				}
				continue
			}
			ls, us := logSumExp(l), logSumExp(u)
			copy(p, l)
			vec.Axpy(-float32(ls), c.ones, p) // log softmax(logits)
			copy(pt, u)
			vec.Axpy(-float32(us), c.ones, pt) // log softmax(teacher)
			rowCE[r] = -float64(p[t])
			vec.Exp(pt, pt)
			// KL = Σ pt·(log pt − log p), pt's logs recomputed from u.
			var k float64
			for j, q := range pt {
				if q > 0 {
					k += float64(q) * ((float64(u[j]) - us) - float64(p[j]))
				}
			}
			rowKL[r] = k
			if dlogits != nil {
				g := dlogits.Data[r*V : (r+1)*V]
				vec.Exp(g, p) // may overwrite l: read above
				vec.Scale((1+w)*invN, g)
				vec.Axpy(-w*invN, pt, g)
				g[t] -= invN
			}
		}
	})
	for r := range rows {
		ce += rowCE[r]
		kl += rowKL[r]
	}
	return ce / float64(n), kl / float64(n), n
}

// logSumExp returns log Σ exp(x), as max x + log Σ exp(x − max x).
func logSumExp(x []float32) float64 {
	m := vec.Max(x)
	return float64(m) + math.Log(float64(vec.SumExp(x, m)))
}
