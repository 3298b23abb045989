package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/serve"
	"github.com/polysketch/polysketch/train"
)

const benchServeHelp = `usage: polysketch bench serve [flags]

Load-tests an OpenAI-compatible server on loopback: for each number of
concurrent clients in --clients, that many clients each send streaming
completion requests one after another (prompt --prompt, --max-tokens
tokens, a seed of their own) for --duration (or until --requests have
been sent), and the case reports requests/s, aggregate generated tokens/s
(and its ratio to the first case's), time to first token and inter-token
latency (p50 and p99, measured by the clients), as a table or, with
--json, as JSON lines.

The server is --url if given (a running 'polysketch serve'); otherwise one
started in this process for --checkpoint, for a model of --shape with
random weights, or for an untrained model of the default configuration.
The clients share the machine's CPU with an in-process server. A model
without a tokenizer that covers its vocabulary (a named shape, or an
import without tokenizer.json) reads the prompt's bytes as ids and writes
every id of 128 and above as "<id>".

flags:
`

// benchServeRow is one case of bench serve.
type benchServeRow struct {
	Clients      int     `json:"clients"`
	Requests     int     `json:"requests"`
	Errors       int     `json:"errors"`
	Seconds      float64 `json:"seconds"`
	RequestsPerS float64 `json:"requests_per_sec"`
	TokensPerS   float64 `json:"tokens_per_sec"`
	Speedup      float64 `json:"speedup"` // tokens/s over the first case's
	TTFTp50      float64 `json:"ttft_p50_ms"`
	TTFTp99      float64 `json:"ttft_p99_ms"`
	ITLp50       float64 `json:"itl_p50_ms"`
	ITLp99       float64 `json:"itl_p99_ms"`
}

func benchServe(args []string, stdout io.Writer) (err error) {
	fs := newFlags("bench serve", benchServeHelp, stdout)
	var (
		url       = fs.String("url", "", "base URL of a running server, as http://127.0.0.1:8080 (default: start one in this process)")
		ckpt      = fs.String("checkpoint", "", "checkpoint for the in-process server; empty for an untrained default model")
		clients   = fs.String("clients", "1,16", "comma-separated numbers of concurrent clients, one case each")
		duration  = fs.Duration("duration", 10*time.Second, "time each case sends requests for")
		requests  = fs.Int("requests", 0, "requests per case at most (0: as many as fit in --duration)")
		maxTokens = fs.Int("max-tokens", 64, "tokens generated per request")
		prompt    = fs.String("prompt", "func main() {\n", "prompt of every request")
		key       = fs.String("api-key", "", "bearer token for --url")
		seqs      = fs.Int("max-sequences", 16, "sequences decoded at once by the in-process server")
		shape     = shapeFlag(fs)
	)
	var asJSON bool
	jsonFlag(fs, &asJSON, "JSON lines instead of a table")
	var prec nn.Precision
	addPrecisionFlag(fs, &prec)
	var prof cpuProfile
	prof.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := prof.start(); err != nil {
		return fmt.Errorf("bench serve: %w", err)
	}
	defer prof.stop(&err)
	counts, err := positiveInts(*clients, ",")
	if err != nil || len(counts) == 0 {
		return fmt.Errorf("bench serve: --clients %q: want comma-separated positive numbers, as 1,16", *clients)
	}
	switch {
	case *duration <= 0:
		return fmt.Errorf("bench serve: --duration %s: must be positive", *duration)
	case *requests < 0:
		return fmt.Errorf("bench serve: --requests %d: must be 0 (no limit) or more", *requests)
	case *maxTokens < 1:
		return fmt.Errorf("bench serve: --max-tokens %d: must be at least 1", *maxTokens)
	case *seqs < 1:
		return fmt.Errorf("bench serve: --max-sequences %d: must be at least 1", *seqs)
	}
	base := strings.TrimSuffix(*url, "/")
	if base != "" && prec != nn.FP32 {
		return errors.New("bench serve: --precision applies to the in-process server; give it to the serve command behind --url instead")
	}
	if *shape != "" && (*ckpt != "" || base != "") {
		return usageError{errors.New("bench serve: --shape and --checkpoint or --url: give the in-process server one model")}
	}
	warnPrecision(stderr, prec)
	if base == "" {
		srv, err := startBenchServer(*ckpt, *shape, *seqs, prec)
		if err != nil {
			return fmt.Errorf("bench serve: %w", err)
		}
		defer srv.stop()
		base = srv.base
	}
	client, closeIdle := benchClient(slices.Max(counts))
	defer closeIdle()
	if !asJSON {
		fmt.Fprintf(stdout, "%s, prompt %q, %d tokens per request\n\n", base, *prompt, *maxTokens)
		fmt.Fprintf(stdout, "%8s %9s %7s %10s %10s %8s %10s %10s %10s %10s\n", "clients", "requests", "errors", "req/s", "tokens/s", "speedup", "ttft p50", "ttft p99", "itl p50", "itl p99")
	}
	var first float64
	for _, c := range counts {
		row, err := benchServeCase(client, base, *key, *prompt, *maxTokens, c, *duration, *requests)
		if err != nil {
			return fmt.Errorf("bench serve: %d clients: %w", c, err)
		}
		if first == 0 {
			first = row.TokensPerS
		}
		if first > 0 {
			row.Speedup = row.TokensPerS / first
		}
		if asJSON {
			if err := writeJSONLine(stdout, row); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(stdout, "%8d %9d %7d %10.2f %10.1f %7.2f× %8.1fms %8.1fms %8.2fms %8.2fms\n", row.Clients, row.Requests, row.Errors,
			row.RequestsPerS, row.TokensPerS, row.Speedup, row.TTFTp50, row.TTFTp99, row.ITLp50, row.ITLp99)
	}
	return nil
}

// startBenchServer serves a checkpoint, a model of a shape with random
// weights, or an untrained default model on a loopback port.
func startBenchServer(dir, shape string, seqs int, prec nn.Precision) (*benchServer, error) {
	var m *model.Model
	var tok tokenizer.Tokenizer = tokenizer.Byte
	switch {
	case dir != "":
		c, err := train.Open(dir)
		if err != nil {
			return nil, err
		}
		m, tok = c.Model, c.Tokenizer
	default:
		mc := model.DefaultConfig()
		if shape != "" {
			var err error
			if mc, _, err = benchShape(shape); err != nil {
				return nil, err
			}
			if mc.Vocab == 50257 {
				if tok, err = tokenizer.GPT2(); err != nil {
					return nil, err
				}
			}
		}
		var err error
		if m, err = model.New(mc); err != nil {
			return nil, err
		}
	}
	if tok == nil || tok.VocabSize() < m.Config().Vocab {
		tok = idTokenizer{m.Config().Vocab}
	}
	o := serve.DefaultOptions()
	o.MaxSequences, o.MaxQueue, o.Precision = seqs, 1<<16, prec
	return serveBench(m, tok, o)
}

// benchServeCase runs one case: c clients for d (or n requests).
func benchServeCase(client *http.Client, base, key, prompt string, maxTokens, c int, d time.Duration, n int) (benchServeRow, error) {
	var (
		mu         sync.Mutex
		ttft, itl  []float64
		tokens     int
		sent, errs int
		firstErr   error
		wg         sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if time.Now().After(deadline) || n > 0 && sent >= n {
			return 0, false
		}
		sent++
		return sent, true
	}
	for range c {
		wg.Go(func() {
			for {
				id, ok := take()
				if !ok {
					return
				}
				r, err := benchRequest(client, base, key, map[string]any{"prompt": prompt, "max_tokens": maxTokens, "seed": uint64(id)})
				mu.Lock()
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					ttft = append(ttft, r.ttft)
					itl = append(itl, r.itl...)
					tokens += r.tokens
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if errs == sent {
		return benchServeRow{}, fmt.Errorf("every request failed: %w", firstErr)
	}
	row := benchServeRow{Clients: c, Requests: sent - errs, Errors: errs, Seconds: secs,
		RequestsPerS: float64(sent-errs) / secs, TokensPerS: float64(tokens) / secs,
		TTFTp50: 1e3 * quantile(ttft, 0.5), TTFTp99: 1e3 * quantile(ttft, 0.99),
		ITLp50: 1e3 * quantile(itl, 0.5), ITLp99: 1e3 * quantile(itl, 0.99)}
	return row, nil
}

// quantile returns the q-quantile of xs (nearest rank), 0 for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[min(len(xs)-1, int(q*float64(len(xs))))]
}

// idTokenizer stands in for the tokenizer of a model of random weights,
// whose tokens mean nothing: bytes are read as the first 256 ids, and an
// id is written as its ASCII byte below 128, else as "<id>".
type idTokenizer struct{ vocab int }

func (t idTokenizer) Name() string   { return fmt.Sprintf("ids-%d", t.vocab) }
func (t idTokenizer) VocabSize() int { return t.vocab }

func (t idTokenizer) Encode(_ context.Context, dst []int32, text []byte) ([]int32, error) {
	for _, b := range text {
		dst = append(dst, int32(b))
	}
	return dst, nil
}

func (t idTokenizer) Decode(dst []byte, ids []int32) ([]byte, error) {
	for _, id := range ids {
		switch {
		case id < 0 || int(id) >= t.vocab:
			return dst, fmt.Errorf("%s tokenizer: token id %d outside the vocabulary [0, %d)", t.Name(), id, t.vocab)
		case id < 128:
			dst = append(dst, byte(id))
		default:
			dst = fmt.Appendf(dst, "<%d>", id)
		}
	}
	return dst, nil
}
