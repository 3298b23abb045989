package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/chart"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/serve"
)

const benchCacheHelp = `usage: polysketch bench cache [flags]

Measures the prefix cache of polysketch serve on loopback, with untrained
models of the default configuration (speed does not depend on the
weights) and the byte tokenizer, each served in this process:

  follow-up  the time to the first token of a follow-up request (a
             history of each length in --histories, then a few new
             tokens), with the cache (the history read by an earlier
             request) and without, side by side, --reps times with it
             (without it up to 3 times, once beyond 4096 tokens); and for
             the same model with softmax attention (--softmax-histories;
             without the cache once)
  memory     the bytes of the state kept for a prefix of each length,
             polysketch and softmax
  shared     --streams clients whose every request starts with the same
             --system tokens: aggregate generated tokens/s without and
             with the cache, alternately, --rounds times each, after one
             request of the shared prompt alone (a server that has seen
             it before)

The time to first token is that of a request for one token, from sending
it to its answer. --plot writes the follow-up times as a PNG.

flags:
`

func benchCache(args []string, stdout io.Writer) error {
	fs := newFlags("bench cache", benchCacheHelp, stdout)
	var (
		parts     = fs.String("parts", "follow-up,memory,shared", "which measurements to run, comma-separated")
		histories = fs.String("histories", "4096,16384,65536", "history lengths of the follow-up measurement, tokens")
		coldMax   = fs.Int("cold-max", 65536, "longest history also measured without the cache")
		softmax   = fs.String("softmax-histories", "1024,4096,16384", "history lengths for the softmax model (its cold prefill grows as the square)")
		reps      = fs.Int("reps", 5, "follow-ups per history with the cache (without it: up to 3 at 4096 tokens or less, else 1)")
		streams   = fs.Int("streams", 16, "concurrent clients of the shared measurement")
		system    = fs.Int("system", 1024, "tokens of the shared prompt")
		maxTokens = fs.Int("max-tokens", 64, "tokens generated per request of the shared measurement")
		duration  = fs.Duration("duration", 8*time.Second, "time of each round of the shared measurement")
		rounds    = fs.Int("rounds", 2, "rounds of the shared measurement, each without then with the cache")
		plot      = fs.String("plot", "", "write a PNG of the follow-up times to this file")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	hs, err := positiveInts(*histories, ",")
	if err != nil {
		return fmt.Errorf("bench cache: --histories: %w", err)
	}
	shs, err := positiveInts(*softmax, ",")
	if err != nil {
		return fmt.Errorf("bench cache: --softmax-histories: %w", err)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"reps", *reps}, {"streams", *streams}, {"system", *system}, {"max-tokens", *maxTokens}, {"rounds", *rounds}} {
		if f.v < 1 {
			return fmt.Errorf("bench cache: --%s %d: must be at least 1", f.name, f.v)
		}
	}
	if *duration <= 0 {
		return fmt.Errorf("bench cache: --duration %s: must be positive", *duration)
	}
	want := map[string]bool{}
	for p := range strings.SplitSeq(*parts, ",") {
		switch p = strings.TrimSpace(p); p {
		case "follow-up", "memory", "shared":
			want[p] = true
		default:
			return fmt.Errorf("bench cache: --parts: unknown part %q; want follow-up, memory or shared", p)
		}
	}
	poly, err := model.New(model.DefaultConfig())
	if err != nil {
		return err
	}
	soft, err := softmaxModel(slices.Max(append(shs, 1024)))
	if err != nil {
		return err
	}
	if want["follow-up"] {
		if err := benchFollowUp(stdout, poly, soft, hs, shs, *coldMax, *reps, *plot); err != nil {
			return fmt.Errorf("bench cache: %w", err)
		}
	}
	if want["memory"] {
		if err := benchCacheMemory(stdout, poly, soft, hs, shs); err != nil {
			return fmt.Errorf("bench cache: %w", err)
		}
	}
	if want["shared"] {
		if err := benchShared(stdout, poly, *streams, *system, *maxTokens, *duration, *rounds); err != nil {
			return fmt.Errorf("bench cache: %w", err)
		}
	}
	return nil
}

// softmaxModel returns the default model with softmax attention and room
// for n positions.
func softmaxModel(n int) (*model.Model, error) {
	c := model.DefaultConfig()
	c.Attention, c.Context = attention.SoftmaxConfig{}, n+256
	return model.New(c)
}

// benchText returns n bytes of Go-like text, the same for every n (a
// shorter one is a prefix of a longer).
func benchText(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "func f%d(x int) int { return x*%d + 1 }\n", i, i)
	}
	return b.String()[:n]
}

// cacheServer is a server of the benchmark, and its client.
type cacheServer struct {
	*benchServer
	client    *http.Client
	closeIdle func()
}

// startCacheServer serves m with a prefix cache of cacheMem bytes (0:
// none) on a loopback port, for clients at once.
func startCacheServer(m *model.Model, cacheMem int64, clients int) (*cacheServer, error) {
	o := serve.DefaultOptions()
	o.MaxQueue, o.MaxLength, o.CacheMemory = 1<<16, 1<<20, cacheMem
	o.KVMemory = 8 << 30
	lb, err := serveBench(m, tokenizer.Byte, o)
	if err != nil {
		return nil, err
	}
	s := &cacheServer{benchServer: lb}
	s.client, s.closeIdle = benchClient(clients)
	return s, nil
}

// close stops the server and its client's connections.
func (s *cacheServer) close() {
	s.closeIdle()
	s.stop()
}

// complete sends a completion request for prompt, sampled greedily, and
// returns the tokens generated and the time it took.
func (s *cacheServer) complete(prompt string, maxTokens int, seed uint64) (int, time.Duration, error) {
	r, err := benchRequest(s.client, s.base, "", map[string]any{"prompt": prompt, "max_tokens": maxTokens, "seed": seed, "temperature": 0})
	return r.tokens, time.Duration(r.total * float64(time.Second)), err
}

// benchFollowUp measures the time to the first token of follow-ups.
func benchFollowUp(stdout io.Writer, poly, soft *model.Model, hs, shs []int, coldMax, reps int, plot string) error {
	fmt.Fprintf(stdout, "time to first token of a follow-up (a history, then about 20 new tokens; ms: median, min–max; %d with the cache)\n", reps)
	fmt.Fprintf(stdout, "%-12s %9s %24s %24s %9s\n", "model", "history", "without cache", "with cache", "ratio")
	var series [4]chart.Series
	series[0].Name, series[1].Name = "polysketch, without cache", "polysketch, with cache"
	series[2].Name, series[3].Name = "softmax, without cache", "softmax, with cache"
	cases := []struct {
		name string
		m    *model.Model
		hs   []int
		off  int // index of the series without cache
	}{{"polysketch", poly, hs, 0}, {"softmax", soft, shs, 2}}
	for _, c := range cases {
		on, err := startCacheServer(c.m, serve.DefaultOptions().CacheMemory, 1)
		if err != nil {
			return err
		}
		off, err := startCacheServer(c.m, 0, 1)
		if err != nil {
			on.close()
			return err
		}
		for _, h := range c.hs {
			history := benchText(h)
			if _, _, err := on.complete(history, 1, 1); err != nil { // the earlier turn: its state is kept
				return err
			}
			var warm, cold []float64
			for r := range reps {
				prompt := history + fmt.Sprintf("\n// follow-up number %d\n", r)
				_, t, err := on.complete(prompt, 1, 1)
				if err != nil {
					return err
				}
				warm = append(warm, 1e3*t.Seconds())
				// Without the cache, a follow-up reads the whole history: once
				// beyond 4096 tokens, and once for softmax, whose cold prefill
				// grows as the square.
				if h <= coldMax && (c.name == "polysketch" && h <= 4096 && r < 3 || r == 0) {
					_, t, err := off.complete(prompt, 1, 1)
					if err != nil {
						return err
					}
					cold = append(cold, 1e3*t.Seconds())
				}
			}
			fmt.Fprintf(stdout, "%-12s %9d %24s %24s %9s\n", c.name, h, spread(cold), spread(warm), ratio(cold, warm))
			if len(cold) > 0 {
				series[c.off].X, series[c.off].Y = append(series[c.off].X, float64(h)), append(series[c.off].Y, median(cold))
			}
			series[c.off+1].X, series[c.off+1].Y = append(series[c.off+1].X, float64(h)), append(series[c.off+1].Y, median(warm))
		}
		on.close()
		off.close()
	}
	fmt.Fprintln(stdout)
	if plot == "" {
		return nil
	}
	var ss []chart.Series
	for _, s := range series {
		if len(s.X) > 0 {
			ss = append(ss, s)
		}
	}
	return chart.Write(plot, &chart.Chart{
		Title:  "time to first token of a follow-up, default model (4×256), 2 cores",
		X:      chart.Axis{Label: "history, tokens", Log: 2},
		Y:      chart.Axis{Label: "ms", Log: 10},
		Series: ss, Width: 20, Height: 12,
	})
}

// spread formats the median and range of xs, "-" for none.
func spread(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f (%.1f–%.1f)", median(xs), slices.Min(xs), slices.Max(xs))
}

func ratio(a, b []float64) string {
	if len(a) == 0 || len(b) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f×", median(a)/median(b))
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// benchCacheMemory prints the bytes of the state kept for prefixes of
// growing length, read in chunks of the server's size.
func benchCacheMemory(stdout io.Writer, poly, soft *model.Model, hs, shs []int) error {
	fmt.Fprintln(stdout, "bytes of the state kept for a prefix (model.Snapshot)")
	fmt.Fprintf(stdout, "%-12s %9s %14s\n", "model", "prefix", "bytes")
	chunk := serve.DefaultOptions().PrefillChunk
	for _, c := range []struct {
		name string
		m    *model.Model
		ns   []int
	}{{"polysketch", poly, append([]int{64, 1024}, hs...)}, {"softmax", soft, append([]int{64, 1024}, shs...)}} {
		ns := slices.Compact(slices.Sorted(slices.Values(c.ns)))
		seq, err := c.m.NewSequence()
		if err != nil {
			return err
		}
		b := c.m.NewBatch()
		ids := []int32(nil)
		for _, x := range []byte(benchText(slices.Max(ns))) {
			ids = append(ids, int32(x))
		}
		for _, n := range ns {
			for seq.Len() < n {
				k := min(chunk, n-seq.Len())
				if _, err := b.Step([]*model.Sequence{seq}, [][]int32{ids[seq.Len() : seq.Len()+k]}); err != nil {
					return err
				}
			}
			snap, err := seq.Snapshot()
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%-12s %9d %14d\n", c.name, n, snap.Bytes())
		}
	}
	fmt.Fprintln(stdout)
	return nil
}

// benchShared runs streams clients whose requests share a prompt of
// system tokens, without and with the cache, alternately.
func benchShared(stdout io.Writer, m *model.Model, streams, system, maxTokens int, d time.Duration, rounds int) error {
	fmt.Fprintf(stdout, "%d streams, every request a shared %d-token prompt and its own line, %d tokens generated; %s a round\n", streams, system, maxTokens, d)
	fmt.Fprintf(stdout, "%-6s %-14s %9s %11s %10s\n", "round", "cache", "requests", "tokens/s", "ratio")
	shared := benchText(system)
	var id struct {
		sync.Mutex
		n int
	}
	for r := range rounds {
		var off float64
		for _, mem := range []int64{0, serve.DefaultOptions().CacheMemory} {
			s, err := startCacheServer(m, mem, streams)
			if err != nil {
				return err
			}
			if _, _, err := s.complete(shared, 1, 0); err != nil {
				s.close()
				return err
			}
			var mu sync.Mutex
			tokens, requests := 0, 0
			var firstErr error
			var wg sync.WaitGroup
			start := time.Now()
			for range streams {
				wg.Go(func() {
					for time.Since(start) < d {
						id.Lock()
						id.n++
						k := id.n
						id.Unlock()
						n, _, err := s.complete(shared+fmt.Sprintf("\n// request %d: write a function\n", k), maxTokens, uint64(k))
						mu.Lock()
						if err != nil && firstErr == nil {
							firstErr = err
						}
						tokens += n
						requests++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			secs := time.Since(start).Seconds()
			s.close()
			if firstErr != nil {
				return firstErr
			}
			tps := float64(tokens) / secs
			name, rat := "off", ""
			if mem == 0 {
				off = tps
			} else {
				name, rat = byteSize(mem).String(), fmt.Sprintf("%.2f×", tps/off)
			}
			fmt.Fprintf(stdout, "%-6d %-14s %9d %11.1f %10s\n", r+1, name, requests, tps, rat)
		}
	}
	return nil
}
