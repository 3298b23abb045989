package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/polysketch/polysketch/chart"
	"github.com/polysketch/polysketch/internal/atomicfile"
	"github.com/polysketch/polysketch/internal/regular"
)

// Metrics is one line of a run's metrics log (metrics.jsonl): the
// measurements of one optimizer step.
type Metrics struct {
	Step         int      `json:"step"`           // updates taken, this one included
	Loss         float64  `json:"loss"`           // mean training cross-entropy of the step's tokens, nats
	LR           float64  `json:"lr"`             // learning rate of the step's update
	GradNorm     float64  `json:"grad_norm"`      // global gradient norm before clipping
	Tokens       int64    `json:"tokens"`         // training tokens seen so far
	TokensPerSec float64  `json:"tokens_per_sec"` // training throughput of the step (forward, backward, update)
	Elapsed      float64  `json:"elapsed"`        // seconds since the run started, over all its sessions
	ValLoss      *float64 `json:"val_loss,omitempty"`
	ValPPL       *float64 `json:"val_ppl,omitempty"`
	// ValAccuracy and ValExact are a task's test scores (task.Metrics):
	// per-token accuracy and exact match over its answer positions. A
	// task's ValLoss is over answer positions only.
	ValAccuracy *float64 `json:"val_accuracy,omitempty"`
	ValExact    *float64 `json:"val_exact,omitempty"`
}

// The files a run keeps in its directory beside the checkpoint.
const (
	// MetricsFile is the metrics log, one JSON object (Metrics) a line.
	MetricsFile = "metrics.jsonl"
	// PlotFile is the loss curve: training and validation loss against step.
	PlotFile = "loss.png"
	// AccuracyPlotFile is a task's curve: test accuracy and exact match
	// against step.
	AccuracyPlotFile = "accuracy.png"
	// CheckpointDir is the checkpoint's directory inside the run's.
	CheckpointDir = "checkpoint"
	// LockFile is locked while a trainer has the run open (Start). It is
	// beside the checkpoint directory, not in it, since a save swaps that
	// one whole; and a run replaced (Replace) has its files replaced,
	// never the directory, so the lock holds for the new run.
	LockFile = ".lock"
)

// ReadMetrics reads the metrics log at path. A line that does not parse
// (the last one, cut short by a crash, say) is skipped and counted.
func ReadMetrics(path string) (ms []Metrics, skipped int, err error) {
	b, err := regular.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m Metrics
		if err := json.Unmarshal(line, &m); err != nil {
			skipped++
			continue
		}
		ms = append(ms, m)
	}
	return ms, skipped, sc.Err()
}

// metricsLog appends lines to a run's metrics log.
type metricsLog struct {
	f *os.File
}

// StageFile returns the name of a run's file (MetricsFile, PlotFile,
// AccuracyPlotFile) for its stage (Run.Stage): the name itself for a run
// of one stage, "" ("metrics.jsonl"), and the name with the stage before
// its extension for another ("metrics-transfer.jsonl").
func StageFile(name, stage string) string {
	if stage == "" {
		return name
	}
	ext := filepath.Ext(name)
	return strings.TrimSuffix(name, ext) + "-" + stage + ext
}

// metricsPath returns the path of the run's metrics log.
func (t *Trainer) metricsPath() string {
	return filepath.Join(t.Dir, StageFile(MetricsFile, t.stage))
}

// openMetrics opens the metrics log at path for appending. It first
// keeps only the lines of steps up to step (those before the checkpoint a
// run resumes from; none for a new run, whose step is -1) and returns
// them.
func openMetrics(path string, step int) (*metricsLog, []Metrics, int, error) {
	old, skipped, err := ReadMetrics(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, 0, fmt.Errorf("reading metrics log: %w", err)
	}
	var kept []Metrics
	var buf bytes.Buffer
	for _, m := range old {
		if m.Step <= step {
			kept = append(kept, m)
			b, _ := json.Marshal(m)
			buf.Write(append(b, '\n'))
		}
	}
	// Rewrite it whole through a temporary file, so that a crash now
	// loses nothing.
	if err := atomicfile.WriteBytes(path, buf.Bytes()); err != nil {
		return nil, nil, 0, fmt.Errorf("writing metrics log: %w", err)
	}
	f, err := regular.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("opening metrics log: %w", err)
	}
	return &metricsLog{f: f}, kept, skipped, nil
}

// write appends m as one line, in one write, so that readers never see
// half a line unless the system crashes.
func (l *metricsLog) write(m Metrics) error {
	if l == nil { // a rank of a data-parallel run other than 0 writes none
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("metrics of step %d: %w", m.Step, err)
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("writing metrics log: %w", err)
	}
	return nil
}

func (l *metricsLog) close() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}

// maxPlotPoints bounds the points of the training-loss line: longer runs
// are averaged over consecutive steps, which also smooths the noise.
const maxPlotPoints = 400

// plot draws the training loss (averaged down to maxPlotPoints points) and
// the validation loss of ms against step into the PNG file at path.
func plot(path string, ms []Metrics) error {
	var trainS, valS chart.Series
	trainS.Name, valS.Name = "training", "validation"
	per := (len(ms) + maxPlotPoints - 1) / maxPlotPoints
	for i := 0; i < len(ms); i += max(per, 1) {
		var x, y float64
		n := 0
		for _, m := range ms[i:min(i+per, len(ms))] {
			x += float64(m.Step)
			y += m.Loss
			n++
		}
		trainS.X = append(trainS.X, x/float64(n))
		trainS.Y = append(trainS.Y, y/float64(n))
	}
	for _, m := range ms {
		if m.ValLoss != nil {
			valS.X = append(valS.X, float64(m.Step))
			valS.Y = append(valS.Y, *m.ValLoss)
		}
	}
	c := &chart.Chart{
		Title:  "loss",
		X:      chart.Axis{Label: "step"},
		Y:      chart.Axis{Label: "cross-entropy (nats per token)"},
		Series: []chart.Series{trainS, valS},
	}
	return chart.Write(path, c)
}
