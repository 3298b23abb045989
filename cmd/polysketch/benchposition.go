package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/polysketch/polysketch/chart"
	"github.com/polysketch/polysketch/model"
)

const benchPositionHelp = `usage: polysketch bench position --checkpoint DIR [flags]

Decodes one stream of --length tokens with a checkpoint, a token a step as
generate does (the tokens fed are fixed pseudo-random ids: the cost does
not depend on them), --rounds times, and reports for each window of
--window positions the least and the most time per token over the rounds
(the least is the estimate on a machine shared with other work) and, at
the window's end, the bytes of the stream's state
(model.Snapshot: what serve's prefix cache keeps). A linear mechanism's
(polysketch, elu, performer, sqpolysketch) time per token and state stay
flat with the position; a KV cache's grow with it, up to the context it
was trained on.

flags:
`

// positionWindow is one window of bench position's measurement.
type positionWindow struct {
	From       int     `json:"from"` // positions [From, To)
	To         int     `json:"to"`
	MsPerToken float64 `json:"ms_per_token"` // the least over the rounds
	MaxMs      float64 `json:"max_ms_per_token"`
	StateBytes int64   `json:"state_bytes"` // after position To-1
}

func benchPosition(args []string, stdout io.Writer) error {
	var ck checkpointFlags
	fs := newFlags("bench position", benchPositionHelp, stdout, ck.usage)
	ck.register(fs)
	var (
		length = fs.Int("length", 16384, "positions to decode")
		window = fs.Int("window", 1024, "positions per reported window")
		rounds = fs.Int("rounds", 3, "times the stream is decoded")
		asJSON = fs.Bool("json", false, "print one JSON object per window")
		plot   = fs.String("plot", "", "write a PNG of the time per token against position to this file")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *length < 1 || *window < 1 || *rounds < 1 {
		return fmt.Errorf("bench position: --length %d, --window %d, --rounds %d: must be positive", *length, *window, *rounds)
	}
	s, err := ck.open()
	if err != nil {
		return fmt.Errorf("bench position: --checkpoint: %w", err)
	}
	m := s.Model
	if lim := model.ContextLimit(m.Config()); lim > 0 && *length > lim {
		return fmt.Errorf("bench position: --length %d: %s attention keeps a KV cache of at most %d positions (the context it was trained on); give --length %d or less",
			*length, m.Config().Attention.Mechanism(), lim, lim)
	}
	var ws []positionWindow
	for r := range *rounds {
		round, err := positionWindows(m, *length, *window)
		if err != nil {
			return fmt.Errorf("bench position: %w", err)
		}
		if r == 0 {
			ws = round
			continue
		}
		for i, w := range round {
			ws[i].MsPerToken, ws[i].MaxMs = min(ws[i].MsPerToken, w.MsPerToken), max(ws[i].MaxMs, w.MsPerToken)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, w := range ws {
			if err := enc.Encode(w); err != nil {
				return err
			}
		}
	} else {
		fmt.Fprintf(stdout, "%s: %s, one stream, %d rounds\n%14s %16s %14s\n", s.Dir, describeAttention(m.Config().Attention), *rounds, "positions", "ms/token", "state bytes")
		for _, w := range ws {
			fmt.Fprintf(stdout, "%6d-%-7d %7.3f-%-8.3f %14d\n", w.From, w.To, w.MsPerToken, w.MaxMs, w.StateBytes)
		}
	}
	if *plot != "" {
		line := chart.Series{Name: m.Config().Attention.Mechanism()}
		for _, w := range ws {
			line.X, line.Y = append(line.X, float64(w.To)), append(line.Y, w.MsPerToken)
		}
		c := &chart.Chart{Title: "decoding one stream", X: chart.Axis{Label: "position"}, Y: chart.Axis{Label: "ms per token"}, Series: []chart.Series{line}}
		if err := chart.Write(*plot, c); err != nil {
			return fmt.Errorf("bench position: --plot: %w", err)
		}
	}
	return nil
}

// positionWindows decodes length positions of one stream with m, a token a
// Step, and measures each window of positions.
func positionWindows(m *model.Model, length, window int) ([]positionWindow, error) {
	seq, err := m.NewSequence()
	if err != nil {
		return nil, err
	}
	b := m.NewBatch()
	vocab := m.Config().Vocab
	var x uint64 = 1
	token := [][]int32{{0}}
	seqs := []*model.Sequence{seq}
	var ws []positionWindow
	for from := 0; from < length; from += window {
		to := min(from+window, length)
		start := time.Now()
		for range to - from {
			x = x*6364136223846793005 + 1442695040888963407 // a fixed sequence of ids
			token[0][0] = int32((x >> 33) % uint64(vocab))
			if _, err := b.Step(seqs, token); err != nil {
				return nil, err
			}
		}
		d := time.Since(start)
		snap, err := seq.Snapshot()
		if err != nil {
			return nil, err
		}
		ms := float64(d.Microseconds()) / 1000 / float64(to-from)
		ws = append(ws, positionWindow{From: from, To: to, MsPerToken: ms, MaxMs: ms, StateBytes: snap.Bytes()})
	}
	return slices.Clip(ws), nil
}
