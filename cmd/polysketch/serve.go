package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/serve"
	"github.com/polysketch/polysketch/train"
)

const serveHelp = `usage: polysketch serve [flags]

Serves a checkpoint over the OpenAI HTTP API, so that OpenAI client
libraries, chat UIs and load tools work against it unchanged (point them at
http://ADDR/v1):

  POST /v1/completions       prompt, max_tokens, temperature, top_p, top_k,
                             presence_penalty, frequency_penalty,
                             logit_bias, stop, seed, n, stream,
                             stream_options, echo, logprobs (best_of and
                             suffix are refused with 400)
  POST /v1/chat/completions  messages, in the plain-text template
                             "System: …\nUser: …\nAssistant: …" (a base
                             model has no chat template of its own), and
                             the sampling fields above
  POST /tokenize             {"content", "with_pieces"}: the prompt's
                             token ids (llama.cpp's form)
  POST /detokenize           {"tokens"}: their text
  GET  /v1/models            the served model (--name)
  GET  /health               503 while the model loads, 200 when ready
  GET  /metrics              Prometheus metrics (needs the API key unless
                             --metrics-public)
  GET  /                     a web page to try prompts

Requests resume from the decoding state after the longest prefix of their
prompt that the prefix cache holds (--cache-memory; with --cache-dir kept
across restarts), with the output of a cold start.

Concurrent requests decode together (continuous batching); with a fixed
seed a request gives the same text alone or under load. SIGINT or SIGTERM
stops accepting requests, lets those in flight finish (up to
--shutdown-timeout) and exits 0; requests still running then are ended
(an error event for a stream, 503 for the others) and the command exits
non-zero.

flags:
`

func runServe(args []string, stdout io.Writer) (err error) {
	var ck checkpointFlags
	fs := newFlags("serve", serveHelp, stdout, ck.usage)
	defer asCLI(fs, &err)
	def := serve.DefaultOptions()
	ck.register(fs)
	var (
		addr     = fs.String("addr", "127.0.0.1:8080", "address to listen on, host:port")
		name     = fs.String("name", "polysketch", "model id that clients name in requests")
		seqs     = fs.Int("max-sequences", def.MaxSequences, "sequences decoded at once")
		queue    = fs.Int("max-queue", def.MaxQueue, fmt.Sprintf("sequences waiting beyond those; more get 429 (at least %d, the most one request may ask for)", serve.MaxChoices))
		length   = fs.Int("max-length", def.MaxLength, "prompt + generated tokens per sequence, for polysketch models (the others are limited by their context length)")
		chunk    = fs.Int("prefill-chunk", def.PrefillChunk, "prompt tokens a sequence reads per step, between other sequences' tokens")
		body     = fs.Int64("max-body", def.MaxBody, "bytes of a request body")
		kv       = fs.Int64("kv-memory", def.KVMemory>>20, "MiB of KV cache for all sequences of a softmax, flash or polynomial model (0: no limit)")
		key      = fs.String("api-key", "", "bearer token required on /v1/, /tokenize, /detokenize and /metrics (default $POLYSKETCH_API_KEY; none if both are empty)")
		public   = fs.Bool("metrics-public", false, "serve /metrics without the API key")
		readTO   = fs.Duration("read-timeout", 30*time.Second, "to read a request (0: none; the headers still have 10s at most)")
		writeTO  = fs.Duration("write-timeout", def.WriteTimeout, "for each write of a response (0: none)")
		idleTO   = fs.Duration("idle-timeout", 2*time.Minute, "before closing an idle keep-alive connection")
		shutdown = fs.Duration("shutdown-timeout", 30*time.Second, "after SIGINT/SIGTERM, how long requests in flight may take to finish")
		cacheDir = fs.String("cache-dir", "", "directory where the prefix cache is written at shutdown and read at start (default: none)")
	)
	cacheMem := memorySize(def.CacheMemory)
	fs.Var(&cacheMem, "cache-memory", "memory for the prefix-state cache, as 512MiB or 2GiB (0: off)")
	var prec nn.Precision
	addPrecisionFlag(fs, &prec)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"max-sequences", int64(*seqs)}, {"max-queue", int64(*queue)}, {"max-length", int64(*length)}, {"prefill-chunk", int64(*chunk)}, {"max-body", *body}} {
		if f.v < 1 {
			return fmt.Errorf("serve: --%s %d: must be at least 1", f.name, f.v)
		}
	}
	if *queue < serve.MaxChoices {
		return fmt.Errorf("serve: --max-queue %d: must be at least %d, the sequences one request may ask for (prompts × n)", *queue, serve.MaxChoices)
	}
	if *kv < 0 {
		return fmt.Errorf("serve: --kv-memory %d: must be 0 (no limit) or more", *kv)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read-timeout", *readTO}, {"write-timeout", *writeTO}, {"idle-timeout", *idleTO}, {"shutdown-timeout", *shutdown}} {
		if d.v < 0 {
			return fmt.Errorf("serve: --%s %s: must not be negative", d.name, d.v)
		}
	}
	if *key == "" {
		*key = os.Getenv("POLYSKETCH_API_KEY")
	}
	if *cacheDir != "" {
		if err := serve.CheckCacheDir(*cacheDir); err != nil {
			return fmt.Errorf("serve: --cache-dir: %w", err)
		}
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("serve: --addr %q: want host:port, as 127.0.0.1:8080: %v", *addr, err)
	}
	warnPrecision(stderr, prec)
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if *key == "" && !loopback(host) {
		log.Warn("serving on a non-loopback address without an API key: anyone who can reach it can use it; set --api-key or POLYSKETCH_API_KEY")
	}

	srv := serve.New(serve.Options{
		Name: *name, MaxSequences: *seqs, MaxQueue: *queue, MaxLength: *length, PrefillChunk: *chunk,
		MaxBody: *body, KVMemory: *kv << 20, APIKey: *key, MetricsPublic: *public, WriteTimeout: *writeTO, Logger: log,
		CacheMemory: int64(cacheMem), CacheDir: *cacheDir, Precision: prec,
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	hs := httpServer(srv, *readTO, *idleTO, log)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(stdout, "polysketch serve: listening on http://%s (the model is loading)\n", ln.Addr())

	ctx, stop := interruptible()
	defer stop()
	// Load while /health answers 503, on a goroutine of its own, so that
	// a signal stops the command even while a slow disk holds the load.
	type load struct {
		c   *train.Saved
		err error
	}
	loaded := make(chan load, 1)
	go func() {
		if testHookLoading != nil {
			testHookLoading()
		}
		c, err := ck.open()
		if err == nil {
			err = c.NeedTokenizer()
		}
		if err == nil {
			if err = srv.ReadyConfig(c.Model, c.Tokenizer, c.TokenizerConfig); err != nil {
				err = fmt.Errorf("checkpoint %s: %w", c.Dir, err) // whose template, or tokenizer, it is
			}
		}
		loaded <- load{c, err}
	}()
	var c *train.Saved
	select {
	case l := <-loaded:
		c, err = l.c, l.err
	case <-ctx.Done():
		err = errors.New("interrupted while loading the model")
	}
	if err != nil {
		hs.Close()
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintf(stdout, "polysketch serve: ready: %s (attention %s, %s) from %s; try http://%s/\n", *name, attention.Spec(c.Model.Config().Attention), prec, c.Dir, ln.Addr())

	select {
	case err := <-served:
		srv.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	fmt.Fprintln(stdout, "polysketch serve: shutting down: finishing the requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
	defer cancel()
	err = hs.Shutdown(sctx)
	cut := 0
	if errors.Is(err, context.DeadlineExceeded) {
		// Tell the requests still running why they end, then close.
		gctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		cut = srv.Shutdown(gctx)
		// The handlers have answered, but net/http writes out what they
		// wrote after they return: wait until the connections are idle
		// (their answers sent), then close what is left. Closing at once
		// had cut a waiting client's 503 to an EOF.
		_ = hs.Shutdown(gctx)
		cancel()
		hs.Close()
		log.Warn("shutdown timeout: requests still in flight were cut off", "timeout", *shutdown, "requests", cut)
		err = nil
	} else {
		srv.Close()
	}
	// The scheduler has stopped either way: its prefix cache can be written.
	if cerr := srv.SaveCache(); cerr != nil {
		return fmt.Errorf("serve: %w", cerr)
	}
	if cut > 0 {
		return fmt.Errorf("serve: shutdown: %d requests still in flight after --shutdown-timeout %s were cut off", cut, *shutdown)
	}
	if err != nil {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	fmt.Fprintln(stdout, "polysketch serve: stopped")
	return nil
}

// testHookLoading, if set, runs where serve starts loading the model.
var testHookLoading func()

// shutdownGrace is how long the requests cut at the shutdown timeout
// have to answer (an error event, a 503) before their connections close.
const shutdownGrace = 2 * time.Second

// headerTimeout bounds the reading of a request's headers, whatever
// --read-timeout says: a client that never finishes its headers must not
// hold a connection.
const headerTimeout = 10 * time.Second

// httpServer returns the HTTP server of the serve command for handler h.
func httpServer(h http.Handler, read, idle time.Duration, log *slog.Logger) *http.Server {
	header := headerTimeout
	if read > 0 {
		header = min(read, header)
	}
	return &http.Server{Handler: h, ReadHeaderTimeout: header, ReadTimeout: read, IdleTimeout: idle,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}

// loopback reports whether host names only this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
