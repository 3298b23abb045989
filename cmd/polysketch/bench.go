package main

// The harness the benchmarks share: the mechanisms they compare, the
// time budget's extrapolation, the peak heap, the memory limit, the lists
// of sizes their flags take, and an in-process server with its client.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/serve"
)

// benchMechanism is one line of the benchmark: a mechanism with its options.
type benchMechanism struct {
	name   string // the spec it was given as
	cfg    attention.Config
	growth float64 // time grows as N^growth: 2 for quadratic mechanisms
}

// benchMechanisms returns the mechanisms of a list-taking --attention
// (defs when not given), each once, its time growing as N^quadratic for
// quadratic mechanisms and as N^linear for linear ones.
func benchMechanisms(af *attentionFlags, defs []string, quadratic, linear float64) ([]benchMechanism, error) {
	cfgs, specs, err := af.configs(defs)
	if err != nil {
		return nil, err
	}
	var ms []benchMechanism
	for i, c := range cfgs {
		growth := quadratic
		if attention.PropertiesOf(c).Linear {
			growth = linear
		}
		if !slices.ContainsFunc(ms, func(m benchMechanism) bool { return m.cfg == c }) {
			ms = append(ms, benchMechanism{specs[i], c, growth})
		}
	}
	return ms, nil
}

// specList returns the full specs of ms, for the title of a table.
func specList(ms []benchMechanism) string {
	var specs []string
	for _, m := range ms {
		specs = append(specs, attention.Spec(m.cfg))
	}
	return strings.Join(specs, ", ")
}

// timing is one measured run time, for extrapolating to larger n.
type timing struct {
	n       int
	seconds float64
}

// predict extrapolates the time of one run at n from the last measurement
// by the mechanism's asymptotic growth, n^growth. Fitting the growth to
// the measurements instead proved unreliable on a busy machine; at small n
// the asymptotic rate overestimates, which errs on the side of the budget.
func predict(last *timing, n int, growth float64) (float64, bool) {
	if last == nil {
		return 0, false
	}
	return last.seconds * math.Pow(float64(n)/float64(last.n), growth), true
}

const heapMetric = "/memory/classes/heap/objects:bytes"

func heapInUse() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// heapSampler records the peak heap in use, sampled every millisecond by a
// goroutine and whenever sample is called.
type heapSampler struct {
	peak atomic.Uint64
	quit chan struct{}
	wg   sync.WaitGroup
}

func startHeapSampler() *heapSampler {
	s := &heapSampler{quit: make(chan struct{})}
	s.sample()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-tick.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *heapSampler) sample() {
	v := heapInUse()
	for {
		old := s.peak.Load()
		if v <= old || s.peak.CompareAndSwap(old, v) {
			return
		}
	}
}

// stop ends sampling and returns the peak.
func (s *heapSampler) stop() uint64 {
	close(s.quit)
	s.wg.Wait()
	s.sample()
	return s.peak.Load()
}

// defaultMemLimit is half of physical memory, at most 8 GiB (8 GiB when
// physical memory is unknown), leaving room for whatever else runs.
func defaultMemLimit() byteSize {
	const most = 8 << 30
	total := physicalMemory()
	if total <= 0 {
		return most
	}
	return byteSize(min(total/2, most))
}

// physicalMemory reads MemTotal from /proc/meminfo; 0 if unknown.
func physicalMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

// parseContexts parses the --n flag of the benchmarks: comma-separated
// positive context lengths, returned sorted without repeats, since the
// time-budget extrapolation runs from small to large.
func parseContexts(ns string) ([]int, error) {
	out, err := positiveInts(ns, ",")
	if err != nil {
		return nil, fmt.Errorf("--n %q: %w", ns, err)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// positiveInts parses a list of positive integers separated by sep: the
// sizes the benchmarks' flags take (--n, --clients, --histories, a
// --cases triple).
func positiveInts(s, sep string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, sep) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", strings.TrimSpace(f))
		}
		out = append(out, n)
	}
	return out, nil
}

// benchServer is a benchmark's in-process server on a loopback port.
type benchServer struct {
	base string // its URL: http://127.0.0.1:PORT
	stop func()
}

// serveBench serves m, whose ids tok reads, with options o (its
// logger aside: it logs errors only) on a loopback port.
func serveBench(m *model.Model, tok tokenizer.Tokenizer, o serve.Options) (*benchServer, error) {
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	srv := serve.New(o)
	if err := srv.Ready(m, tok); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return nil, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	return &benchServer{base: "http://" + ln.Addr().String(), stop: func() {
		hs.Close()
		srv.Close()
	}}, nil
}

// benchClient returns a client for up to clients requests at once, and a
// function that closes its idle connections.
func benchClient(clients int) (*http.Client, func()) {
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	return &http.Client{Transport: tr}, tr.CloseIdleConnections
}

// benchResult is the timing of one request.
type benchResult struct {
	ttft   float64   // seconds to the first text
	itl    []float64 // seconds between pieces of text
	total  float64   // seconds to the end of the response
	tokens int       // generated, from the usage
}

// benchRequest sends one streaming completion request of the fields of
// body (prompt, max_tokens, seed, …) to the server at base, with the API
// key key if not "", and times its events.
func benchRequest(client *http.Client, base, key string, body map[string]any) (benchResult, error) {
	body["stream"], body["stream_options"] = true, map[string]bool{"include_usage": true}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(context.Background(), "POST", base+"/v1/completions", strings.NewReader(string(b)))
	if err != nil {
		return benchResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return benchResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return benchResult{}, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var r benchResult
	last := time.Time{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct{ Text string } `json:"choices"`
			Usage   *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct{ Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return r, fmt.Errorf("event %q: %w", data, err)
		}
		if ev.Error != nil {
			return r, errors.New(ev.Error.Message)
		}
		if ev.Usage != nil {
			r.tokens = ev.Usage.CompletionTokens
		}
		if len(ev.Choices) == 0 || ev.Choices[0].Text == "" {
			continue
		}
		now := time.Now()
		if last.IsZero() {
			r.ttft = now.Sub(start).Seconds()
		} else {
			r.itl = append(r.itl, now.Sub(last).Seconds())
		}
		last = now
	}
	r.total = time.Since(start).Seconds()
	return r, sc.Err()
}
