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
	"os/signal"
	"syscall"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/serve"
)

const serveHelp = `usage: polysketch serve [flags]

Serves a checkpoint over the OpenAI HTTP API, so that OpenAI client
libraries, chat UIs and load tools work against it unchanged (point them at
http://ADDR/v1):

  POST /v1/completions       prompt, max_tokens, temperature, top_p, top_k,
                             stop, seed, n, stream, stream_options, echo,
                             logprobs
  POST /v1/chat/completions  messages, in the plain-text template
                             "System: …\nUser: …\nAssistant: …" (a base
                             model has no chat template of its own)
  GET  /v1/models            the served model (--name)
  GET  /health               503 while the model loads, 200 when ready
  GET  /metrics              Prometheus metrics
  GET  /                     a web page to try prompts

Concurrent requests decode together (continuous batching); with a fixed
seed a request gives the same text alone or under load. SIGINT or SIGTERM
stops accepting requests, lets those in flight finish (up to
--shutdown-timeout) and exits 0.

flags:
`

func runServe(args []string, stdout io.Writer) error {
	fs := newFlags("serve", stdout)
	def := serve.DefaultOptions()
	var (
		ckpt     = fs.String("checkpoint", "run", "checkpoint directory, or the run directory holding it")
		addr     = fs.String("addr", "127.0.0.1:8080", "address to listen on, host:port")
		name     = fs.String("name", "polysketch", "model id that clients name in requests")
		seqs     = fs.Int("max-sequences", def.MaxSequences, "sequences decoded at once")
		queue    = fs.Int("max-queue", def.MaxQueue, "sequences waiting beyond those; more get 429")
		length   = fs.Int("max-length", def.MaxLength, "prompt + generated tokens per sequence, for polysketch models (the others are limited by their context length)")
		chunk    = fs.Int("prefill-chunk", def.PrefillChunk, "prompt tokens a sequence reads per step, between other sequences' tokens")
		body     = fs.Int64("max-body", def.MaxBody, "bytes of a request body")
		kv       = fs.Int64("kv-memory", def.KVMemory>>20, "MiB of KV cache for all sequences of a softmax, flash or polynomial model (0: no limit)")
		tokName  = fs.String("tokenizer", "", "tokenizer to check against the checkpoint's (default: the checkpoint's own; "+tokenizerFlagHelp+")")
		key      = fs.String("api-key", "", "bearer token required on /v1/ (default $POLYSKETCH_API_KEY; none if both are empty)")
		readTO   = fs.Duration("read-timeout", 30*time.Second, "to read a request")
		writeTO  = fs.Duration("write-timeout", def.WriteTimeout, "for each write of a response (0: none)")
		idleTO   = fs.Duration("idle-timeout", 2*time.Minute, "before closing an idle keep-alive connection")
		shutdown = fs.Duration("shutdown-timeout", 30*time.Second, "after SIGINT/SIGTERM, how long requests in flight may take to finish")
	)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveHelp)
		fs.PrintDefaults()
	}
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
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("serve: --addr %q: want host:port, as 127.0.0.1:8080: %v", *addr, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if *key == "" && !loopback(host) {
		log.Warn("serving on a non-loopback address without an API key: anyone who can reach it can use it; set --api-key or POLYSKETCH_API_KEY")
	}

	srv := serve.New(serve.Options{
		Name: *name, MaxSequences: *seqs, MaxQueue: *queue, MaxLength: *length, PrefillChunk: *chunk,
		MaxBody: *body, KVMemory: *kv << 20, APIKey: *key, WriteTimeout: *writeTO, Logger: log,
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: min(*readTO, 10*time.Second), ReadTimeout: *readTO, IdleTimeout: *idleTO,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(stdout, "polysketch serve: listening on http://%s (the model is loading)\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Load while /health answers 503.
	dir := checkpointDir(*ckpt)
	c, err := checkpoint.Load(dir)
	if err == nil {
		var tok tokenizer.Tokenizer
		if tok, err = checkpointTokenizer(c, dir, *tokName); err == nil {
			err = srv.Ready(c.Model, tok)
		}
	}
	if err != nil {
		hs.Close()
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintf(stdout, "polysketch serve: ready: %s (attention %s) from %s; try http://%s/\n", *name, attention.Spec(c.Model.Config().Attention), dir, ln.Addr())

	select {
	case err := <-served:
		srv.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stop() // a second signal kills the process
	fmt.Fprintln(stdout, "polysketch serve: shutting down: finishing the requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
	defer cancel()
	err = hs.Shutdown(sctx)
	srv.Close()
	if errors.Is(err, context.DeadlineExceeded) {
		hs.Close()
		log.Warn("shutdown timeout: requests still in flight were cut off", "timeout", *shutdown)
	} else if err != nil {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	fmt.Fprintln(stdout, "polysketch serve: stopped")
	return nil
}

// loopback reports whether host names only this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
