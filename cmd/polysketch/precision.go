package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
)

// precisionFlag is the --precision flag of train, bench train,
// experiment, eval, generate, serve and bench serve: the number format of
// the model's dense products.
type precisionFlag struct{ p *nn.Precision }

// addPrecisionFlag defines --precision on fs, bound to p.
func addPrecisionFlag(fs *flag.FlagSet, p *nn.Precision) {
	fs.Var(precisionFlag{p}, "precision", "number format of the dense layers' products: fp32, or bf16 (bfloat16 inputs, float32 accumulation and master weights; see docs/bf16.md)")
}

func (f precisionFlag) String() string {
	if f.p == nil {
		return nn.FP32.String()
	}
	return f.p.String()
}

func (f precisionFlag) Set(s string) error {
	p, err := nn.ParsePrecision(s)
	if err != nil || s == "" {
		return errors.New("want fp32 or bf16")
	}
	*f.p = p
	return nil
}

// warnPrecision writes one line to w when p is bf16 and the products run
// on the portable Go kernel, far slower than any other.
func warnPrecision(w io.Writer, p nn.Precision) {
	if p == nn.BF16 && blas.KernelBF16() == "go" {
		fmt.Fprintln(w, "polysketch: warning: the portable bf16 kernel is in use (POLYSKETCH_NOASM=1, POLYSKETCH_BF16_KERNEL=go or a purego build): --precision bf16 runs on the portable Go path, slower than fp32")
	}
}

// inferIn prepares m for decoding at precision p: in bf16 its dense
// weights are kept only as bf16 copies (model.Model.ReleaseFP32).
func inferIn(m *model.Model, p nn.Precision) error {
	if p != nn.BF16 {
		return nil
	}
	m.SetPrecision(p)
	return m.ReleaseFP32()
}

// precisionDesc names p and, for bf16, the kernel its products run on.
func precisionDesc(p nn.Precision) string {
	if p == nn.BF16 {
		return fmt.Sprintf("bf16 products (kernel %s)", blas.KernelBF16())
	}
	return "fp32 products"
}
