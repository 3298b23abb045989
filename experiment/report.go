package experiment

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/polysketch/polysketch/chart"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/atomicfile"
	"github.com/polysketch/polysketch/train"
)

// Result is the outcome of one run: one line of results.jsonl.
type Result struct {
	Run       string  `json:"run"`
	Mechanism string  `json:"mechanism"`
	Row       string  `json:"row"`
	Column    string  `json:"column"`
	Size      int     `json:"size"`
	Step      int     `json:"step"`     // steps trained
	Loss      float64 `json:"loss"`     // training loss of the last step
	ValLoss   float64 `json:"val_loss"` // the last validation's loss (a task's: over answer positions)
	ValPPL    float64 `json:"val_ppl"`
	Accuracy  float64 `json:"accuracy,omitempty"` // a task's per-token accuracy
	Exact     float64 `json:"exact,omitempty"`    // a task's exact match
	// StepsPerSec is the median training speed over the run's steps but
	// the first (which warms the buffers up).
	StepsPerSec float64 `json:"steps_per_sec"`
	Seconds     float64 `json:"seconds"` // training time
	// Note says what the run took from others: the coefficients a
	// frozen-best run (Run.FreezeBest) trained with.
	Note string `json:"note,omitempty"`
	// Downstream are the downstream experiment's scores of the model.
	Downstream []Score `json:"downstream,omitempty"`
	// Tokenizer names the tokens of the downstream experiment's
	// perplexity of the model: its own.
	Tokenizer string `json:"tokenizer,omitempty"`
	// A linearization's: the validation loss after attention transfer
	// (Skipped: of the converted student, with nothing to transfer), and
	// the per-layer relative errors before and after it.
	TransferLoss *float64  `json:"transfer_loss,omitempty"`
	Skipped      bool      `json:"skipped,omitempty"`
	LayersBefore []float64 `json:"layers_before,omitempty"`
	LayersAfter  []float64 `json:"layers_after,omitempty"`

	history  []train.Metrics
	transfer []train.Metrics // a linearization's attention transfer, its validations
}

// result reads the outcome of run r from its directory.
func result(dir string, r Run) (Result, error) {
	ms, _, err := train.ReadMetrics(filepath.Join(dir, train.MetricsFile))
	if err != nil {
		return Result{}, err
	}
	if len(ms) == 0 {
		return Result{}, fmt.Errorf("%s: no steps logged", dir)
	}
	res := Result{Run: r.Name, Mechanism: r.Mechanism, Row: r.Row, Column: r.Column, Size: r.Size, history: ms}
	last := ms[len(ms)-1]
	res.Step, res.Loss, res.Seconds = last.Step, last.Loss, last.Elapsed
	for _, m := range slices.Backward(ms) {
		if m.ValLoss != nil {
			res.ValLoss, res.ValPPL = *m.ValLoss, *m.ValPPL
			if m.ValExact != nil {
				res.Accuracy, res.Exact = *m.ValAccuracy, *m.ValExact
			}
			break
		}
	}
	var speeds []float64
	per := float64(r.Train.Batch * r.Train.Accum * r.Model.Context)
	for _, m := range ms[min(1, len(ms)-1):] {
		speeds = append(speeds, m.TokensPerSec/per)
	}
	sort.Float64s(speeds)
	res.StepsPerSec = speeds[len(speeds)/2]
	return res, nil
}

// report writes results.jsonl, the table and the plots.
func (e *Experiment) report(dir string, plan Plan, rs []Result, logf func(string, ...any)) error {
	var jl bytes.Buffer
	for _, r := range rs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		jl.Write(append(b, '\n'))
	}
	if err := write(filepath.Join(dir, ResultsFile), jl.Bytes()); err != nil {
		return err
	}
	table := e.Table(plan, rs)
	if e.kind == linearizeKind {
		table = linearizeTable(plan, rs)
	}
	if err := write(filepath.Join(dir, TableFile), []byte(table)); err != nil {
		return err
	}
	for _, c := range e.charts(plan, rs) {
		if err := chart.Write(filepath.Join(dir, c.file), &c.Chart); err != nil {
			logf("plot: %v", err) // the table and results hold the same numbers
		}
	}
	return nil
}

func write(path string, b []byte) error {
	return atomicfile.WriteBytes(path, b)
}

// Table returns the markdown table of results rs of plan: a row per
// mechanism, a column per size, as the paper lays its tables out.
func (e *Experiment) Table(plan Plan, rs []Result) string {
	if e.kind == downstreamKind {
		return downstreamTable(plan, rs)
	}
	var rows, cols []string
	cell := map[[2]string]string{}
	for _, r := range rs {
		if !slices.Contains(rows, r.Row) {
			rows = append(rows, r.Row)
		}
		if !slices.Contains(cols, r.Column) {
			cols = append(cols, r.Column)
		}
		cell[[2]string{r.Row, r.Column}] = e.cell(r)
	}
	var b strings.Builder
	what := map[kind]string{
		taskKind:  "exact match on the held-out test examples (every answer token right)",
		lmKind:    "validation perplexity (" + tokens(plan) + ")",
		speedKind: "training steps per second",
	}[e.kind]
	switch e.measure {
	case finalLoss:
		what = "final test loss over the answer positions (nats), and exact match"
	case tokenAccuracy:
		what = "accuracy per answer token on the held-out test examples, and exact match"
	}
	steps := 0
	if len(plan.Runs) > 0 {
		steps = plan.Runs[0].Train.Steps
	}
	quick := ""
	if plan.Quick {
		quick = " --quick"
	}
	if len(plan.Runs) > 0 && plan.Runs[0].Train.Task != nil && plan.Runs[0].Train.Task.Path != "" {
		quick += fmt.Sprintf(" --task %s --context %d", plan.Runs[0].Train.Task.Path, plan.Runs[0].Model.Context)
	}
	fmt.Fprintf(&b, "%s: %s, after %d steps (`polysketch experiment %s%s --seed %d`)\n\n", e.Name, what, steps, e.Name, quick, plan.Seed)
	fmt.Fprintf(&b, "| mechanism | %s |\n|---|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s |", row)
		for _, c := range cols {
			v, ok := cell[[2]string{row, c}]
			if !ok {
				v = "–"
			}
			fmt.Fprintf(&b, " %s |", v)
		}
		b.WriteString("\n")
	}
	for _, r := range rs {
		if r.Note != "" {
			fmt.Fprintf(&b, "\n%s, %s: %s\n", r.Row, r.Column, r.Note)
		}
	}
	return b.String()
}

// tokens names the tokens the plan's runs read: "bytes", or "gpt2
// tokens" and the like.
func tokens(plan Plan) string {
	if len(plan.Runs) == 0 || plan.Runs[0].Train.Tokenizer == "" || plan.Runs[0].Train.Tokenizer == tokenizer.Byte.Name() {
		return "bytes"
	}
	return plan.Runs[0].Train.Tokenizer + " tokens"
}

func (e *Experiment) cell(r Result) string {
	switch e.kind {
	case taskKind:
		switch e.measure {
		case finalLoss:
			return fmt.Sprintf("%.3g (%.1f%%)", r.ValLoss, 100*r.Exact)
		case tokenAccuracy:
			return fmt.Sprintf("%.1f%% (%.1f%%)", 100*r.Accuracy, 100*r.Exact)
		}
		return fmt.Sprintf("%.2f%%", 100*r.Exact)
	case lmKind:
		return fmt.Sprintf("%.3f", r.ValPPL)
	}
	return fmt.Sprintf("%.2f", r.StepsPerSec)
}

type namedChart struct {
	file string
	chart.Chart
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// charts returns the plots of rs: a task's exact match and a language
// model's validation loss against step, one chart per size; training
// speed against context length.
func (e *Experiment) charts(plan Plan, rs []Result) []namedChart {
	if e.kind == linearizeKind {
		return linearizeCharts(plan, rs)
	}
	if e.kind == downstreamKind {
		return nil // the table says it all
	}
	if e.kind == speedKind {
		c := namedChart{file: "speed.png", Chart: chart.Chart{
			Title: "training speed", X: chart.Axis{Label: "context length", Log: 2},
			Y: chart.Axis{Label: "steps per second", Log: 2},
		}}
		for _, r := range rs {
			i := slices.IndexFunc(c.Series, func(s chart.Series) bool { return s.Name == r.Row })
			if i < 0 {
				c.Series = append(c.Series, chart.Series{Name: r.Row})
				i = len(c.Series) - 1
			}
			c.Series[i].X = append(c.Series[i].X, float64(r.Size))
			c.Series[i].Y = append(c.Series[i].Y, r.StepsPerSec)
		}
		return []namedChart{c}
	}
	var out []namedChart
	for _, r := range rs {
		name, label, title := "exact-", "exact match", "test exact match, "
		if e.kind == lmKind {
			name, label, title = "val-loss-", "validation loss (nats per "+strings.TrimSuffix(tokens(plan), "s")+")", "validation loss, "
		}
		file := name + unsafeName.ReplaceAllString(r.Column, "") + ".png"
		i := slices.IndexFunc(out, func(c namedChart) bool { return c.file == file })
		if i < 0 {
			out = append(out, namedChart{file: file, Chart: chart.Chart{
				Title: title + r.Column, X: chart.Axis{Label: "step"}, Y: chart.Axis{Label: label},
			}})
			i = len(out) - 1
		}
		s := chart.Series{Name: r.Row}
		for _, m := range r.history {
			switch {
			case e.kind == taskKind && m.ValExact != nil:
				s.X, s.Y = append(s.X, float64(m.Step)), append(s.Y, *m.ValExact)
			case e.kind == lmKind && m.ValLoss != nil:
				s.X, s.Y = append(s.X, float64(m.Step)), append(s.Y, *m.ValLoss)
			}
		}
		out[i].Series = append(out[i].Series, s)
	}
	return out
}
