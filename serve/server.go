// Package serve is polysketch's OpenAI-compatible inference server:
// POST /v1/completions and /v1/chat/completions (streamed as server-sent
// events or not), GET /v1/models, POST /tokenize and /detokenize
// (llama.cpp's form and vLLM's) with GET /tokenizer_info, /health,
// Prometheus /metrics and a small web page at /.
//
// Requests are decoded together by continuous batching (see scheduler.go):
// every step of the model runs all active sequences at once, sequences
// join and leave between steps, and long prompts are read in chunks
// between other sequences' tokens. A request's tokens depend on its own
// fields and seed alone, not on the requests it shares steps with: with
// a fixed seed, the same request gives the same bytes alone or under
// load.
//
// Limits: Options.MaxSequences decode at once, Options.MaxQueue more wait
// (beyond that, 429 with Retry-After; a request for more sequences than
// the queue holds, 400), prompt plus generation fit the
// model's context (or Options.MaxLength for polysketch, whose state does
// not grow), request bodies are bounded, and a client that goes away
// frees its slot at the next step. Bad requests are answered with an
// OpenAI-style error object and the right status, and a panic inside a
// request is answered with 500 without taking the server down.
package serve

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/sample"
)

// Options configure a Server. Zero counts and sizes (MaxSequences through
// MaxBody) take the defaults of DefaultOptions; a zero KVMemory or
// WriteTimeout means no limit.
type Options struct {
	Name          string        // the model id clients name; any name is accepted when empty
	MaxSequences  int           // sequences decoded at once
	MaxQueue      int           // sequences waiting beyond those; more are refused with 429
	MaxLength     int           // prompt + generated tokens of a sequence when the model has no context limit
	PrefillChunk  int           // prompt tokens a sequence reads per step
	StepRows      int           // rows per step beyond which further prompt chunks wait a step
	MaxBody       int64         // bytes of a request body
	KVMemory      int64         // bytes of KV cache for all sequences of a KV-cache model; 0 for no limit
	APIKey        string        // bearer token required on /v1/, /tokenize, /detokenize, /tokenizer_info and /metrics; empty for none
	MetricsPublic bool          // serve /metrics without the API key
	WriteTimeout  time.Duration // for each write to a client; 0 for none
	Logger        *slog.Logger  // a line per failed request (at most logBurst a second); nil for slog.Default()
	CacheMemory   int64         // bytes of the prefix-state cache (see cache.go); 0 turns it off
	CacheDir      string        // where the prefix cache is kept across restarts (SaveCache); empty for nowhere
	Precision     nn.Precision  // of the model's dense products; with nn.BF16 Ready keeps the weights in bf16 alone
}

// DefaultOptions returns the defaults of the serve command.
func DefaultOptions() Options {
	return Options{
		MaxSequences: 16, MaxQueue: 256, MaxLength: 4096, PrefillChunk: 64, StepRows: 256,
		MaxBody: 1 << 20, KVMemory: 1 << 30, WriteTimeout: 30 * time.Second, CacheMemory: 1 << 30,
	}
}

func (o *Options) fill() {
	d := DefaultOptions()
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&o.MaxSequences, d.MaxSequences)
	set(&o.MaxQueue, d.MaxQueue)
	set(&o.MaxLength, d.MaxLength)
	set(&o.PrefillChunk, d.PrefillChunk)
	set(&o.StepRows, d.StepRows)
	if o.MaxBody <= 0 {
		o.MaxBody = d.MaxBody
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Server answers the API. It serves /health (503), /metrics and / from
// the start, and the completion endpoints once Ready has given it a
// model; until then they answer 503.
type Server struct {
	opts    Options
	mux     *http.ServeMux
	metrics *metrics
	created int64
	ids     atomic.Uint64
	flight  atomic.Int64 // requests being answered
	rejects rejectLog

	mu    sync.Mutex
	ready *loaded // nil while loading

	cacheMetrics *cacheMetrics
}

// loaded is the model a Server serves.
type loaded struct {
	m      *model.Model
	tok    tokenizer.Tokenizer
	eot    int32
	hasEOT bool
	// cfg gives the ids put before a prompt and those that end a
	// sequence; chat is the model's chat template, nil without one.
	cfg   *tokenizer.Config
	chat  *chatTemplate
	limit int // positions per sequence
	kvRow int64
	sched *scheduler

	weights    [32]byte // weightDigest of the model as Ready got it
	hasWeights bool     // whether its float32 weights were there to hash
}

//go:embed static/index.html
var page []byte

// New returns a Server with options o, not yet ready.
func New(o Options) *Server {
	o.fill()
	s := &Server{opts: o, mux: http.NewServeMux(), metrics: newMetrics(), created: time.Now().Unix()}
	s.cacheMetrics = newCacheMetrics(s.metrics.reg)
	s.mux.HandleFunc("POST /v1/completions", s.api(s.completions))
	s.mux.HandleFunc("POST /v1/chat/completions", s.api(s.chat))
	s.mux.HandleFunc("GET /v1/models", s.api(s.models))
	s.mux.HandleFunc("GET /v1/models/{id}", s.api(s.model))
	s.mux.HandleFunc("POST /tokenize", s.api(s.tokenize))
	s.mux.HandleFunc("POST /detokenize", s.api(s.detokenize))
	s.mux.HandleFunc("GET /tokenizer_info", s.api(s.tokenizerInfo))
	s.mux.HandleFunc("GET /health", s.health)
	prom := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
	if o.MetricsPublic {
		s.mux.Handle("GET /metrics", prom)
	} else {
		s.mux.HandleFunc("GET /metrics", s.api(func(w http.ResponseWriter, r *http.Request) *apiError {
			prom.ServeHTTP(w, r)
			return nil
		}))
	}
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	for path, method := range map[string]string{
		"/v1/completions": "POST", "/v1/chat/completions": "POST", "/v1/models": "GET",
		"/health": "GET", "/metrics": "GET", "/tokenize": "POST", "/detokenize": "POST", "/tokenizer_info": "GET",
	} {
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", method)
			s.fail(w, r, errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s: use %s", r.Method, path, method))
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, errorf(http.StatusNotFound, "not_found", "no endpoint %s %s; see GET /v1/models, POST /v1/completions, POST /v1/chat/completions, POST /tokenize", r.Method, r.URL.Path))
	})
	return s
}

// Ready starts serving model m with tokenizer tok; the completion
// endpoints answer from now on.
func (s *Server) Ready(m *model.Model, tok tokenizer.Tokenizer) error {
	return s.ReadyConfig(m, tok, tokenizer.DefaultConfig(tok))
}

// ReadyConfig is Ready with the configuration cfg of the tokenizer (from
// the model's directory, see tokenizer.ReadConfig): prompts start with
// its Begin, sequences stop at its EOS, and /v1/chat/completions renders
// conversations with its chat template, if it has one, rather than as a
// plain transcript. A chat template that does not compile, or cannot
// render a conversation of one user message, is refused here.
func (s *Server) ReadyConfig(m *model.Model, tok tokenizer.Tokenizer, cfg *tokenizer.Config) error {
	c := m.Config()
	if tok.VocabSize() > c.Vocab {
		return fmt.Errorf("tokenizer %s has %d tokens, the model only %d", tok.Name(), tok.VocabSize(), c.Vocab)
	}
	if cfg == nil {
		cfg = tokenizer.DefaultConfig(tok)
	}
	l := &loaded{m: m, tok: tok, limit: model.ContextLimit(c), cfg: cfg}
	if cfg.ChatTemplate != "" {
		var err error
		if l.chat, err = newChatTemplate(cfg); err != nil {
			return err
		}
	}
	// The weights name the model in a prefix-cache file: hash them before
	// bf16 inference releases their float32 values.
	if s.opts.CacheDir != "" {
		l.weights, l.hasWeights = weightDigest(m)
	}
	if s.opts.Precision == nn.BF16 && m.Precision() != nn.BF16 {
		m.SetPrecision(nn.BF16)
		if err := m.ReleaseFP32(); err != nil {
			return err
		}
	}
	l.eot, l.hasEOT = tokenizer.EndOfText(tok)
	if l.limit == 0 {
		l.limit = s.opts.MaxLength
	} else {
		// A KV cache holds keys and values of every layer; it grows by
		// doubling, so reserve twice the positions.
		l.kvRow = 2 * 2 * int64(c.Layers) * int64(c.Dim) * 4
	}
	l.sched = newScheduler(m, &s.opts, s.metrics)
	s.startCache(l)
	go l.sched.run()
	s.mu.Lock()
	s.ready = l
	s.mu.Unlock()
	return nil
}

// Close stops the scheduler: requests still running end with an error.
// Call it after http.Server.Shutdown has let them finish.
func (s *Server) Close() {
	s.mu.Lock()
	l := s.ready
	s.mu.Unlock()
	if l != nil {
		l.sched.close()
	}
}

func (s *Server) loaded() *loaded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// Shutdown ends the requests still being answered, for a server whose
// http.Server.Shutdown ran out of time: generation stops, each stream
// gets an error event and each waiting client a 503. It returns once
// their handlers have answered, or ctx is done, with the number of
// requests that were cut; then close the connections
// (http.Server.Close).
func (s *Server) Shutdown(ctx context.Context) int {
	cut := int(s.flight.Load())
	s.Close()
	for s.flight.Load() > 0 {
		select {
		case <-ctx.Done():
			return cut
		case <-time.After(5 * time.Millisecond):
		}
	}
	return cut
}

// ServeHTTP answers a request, counting it and recovering from panics.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.flight.Add(1)
	defer s.flight.Add(-1)
	rw := &recorder{ResponseWriter: w, code: http.StatusOK}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.opts.Logger.Error("panic in request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
			if !rw.wrote {
				s.fail(rw, r, errorf(http.StatusInternalServerError, "internal_error", "internal error: the request failed; the server is still up"))
			}
		}
		// The endpoint's pattern, not the path: labels must not grow with
		// every model id or path a scanner tries.
		_, path := s.mux.Handler(r)
		if _, p, ok := strings.Cut(path, " "); ok {
			path = p
		}
		if path == "/" {
			path = "other"
		}
		s.metrics.requests.WithLabelValues(path, strconv.Itoa(rw.code)).Inc()
	}()
	s.mux.ServeHTTP(rw, r)
}

// recorder remembers the status of a response.
type recorder struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// api wraps an endpoint that needs the API key: authentication, then
// the handler, whose error is answered as an OpenAI error object.
func (s *Server) api(h func(w http.ResponseWriter, r *http.Request) *apiError) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="polysketch"`)
			s.fail(w, r, errorf(http.StatusUnauthorized, "invalid_api_key", "missing or wrong API key: send the header Authorization: Bearer <key>"))
			return
		}
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	}
}

// authorized reports whether r carries the API key, if there is one. The
// scheme of the Authorization header is case-insensitive (RFC 9110).
func (s *Server) authorized(r *http.Request) bool {
	key := s.opts.APIKey
	if key == "" {
		return true
	}
	scheme, got, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	return ok && strings.EqualFold(scheme, "Bearer") &&
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(key)) == 1
}

// fail answers err as {"error": {...}}, counts it by its code and logs a
// line, unless more than logBurst were logged in the last second.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err *apiError) {
	s.reject(r, err)
	if err.status == http.StatusTooManyRequests || err.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, err.status, map[string]any{"error": err})
}

// reject counts err by its code and logs a line, unless more than
// logBurst were logged in the last second.
func (s *Server) reject(r *http.Request, err *apiError) {
	reason := "other"
	if err.Code != nil {
		reason = *err.Code // a fixed set of codes, never the client's text
	}
	s.metrics.rejected.WithLabelValues(reason).Inc()
	if ok, dropped := s.rejects.allow(time.Now()); ok {
		args := []any{"method", r.Method, "path", r.URL.Path, "status", err.status, "error", err.Message}
		if dropped > 0 {
			args = append(args, "not_logged_before", dropped)
		}
		s.opts.Logger.Warn("request failed", args...)
	}
}

// writeJSON answers v as JSON with the given status; v that cannot be
// encoded (a NaN, say) is answered with 500 and an error, never an empty
// body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(map[string]any{"error": errorf(status, "internal_error", "internal error: the answer cannot be written as JSON: %v", err)})
	}
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.loaded() == nil {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": errorf(http.StatusServiceUnavailable, "loading", "the model is loading")})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *Server) name() string {
	if s.opts.Name == "" {
		return "polysketch"
	}
	return s.opts.Name
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) *apiError {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []modelInfo{{s.name(), "model", s.created, "polysketch"}}})
	return nil
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) *apiError {
	if id := r.PathValue("id"); id != s.name() {
		return errorf(http.StatusNotFound, "model_not_found", "model %q does not exist; this server has %q", id, s.name())
	}
	writeJSON(w, http.StatusOK, modelInfo{s.name(), "model", s.created, "polysketch"})
	return nil
}

// readRequest reads and decodes a request body, and checks the model
// name.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request) (*completionRequest, *apiError) {
	var req completionRequest
	if err := s.readBody(w, r, &req); err != nil {
		return nil, err
	}
	if s.opts.Name != "" && req.Model != "" && req.Model != s.opts.Name {
		return nil, errorf(http.StatusNotFound, "model_not_found", "model %q does not exist; this server has %q", req.Model, s.opts.Name)
	}
	return &req, nil
}

// request is a validated completion request: its prompts, their tokens
// and the settings of generation.
type request struct {
	chat bool
	// templated is set for a chat rendered by the model's own template,
	// whose text holds its special tokens (and no plain-transcript stop).
	templated bool
	prompts   []string
	tokens    [][]int32 // of each prompt; given by the client, or encoded by generate
	begin     []int     // of each prompt, the tokens generate put before its text
	set       sampling
	stream    bool
	usage     bool
	echo      bool
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) *apiError {
	l := s.loaded()
	if l == nil {
		return errorf(http.StatusServiceUnavailable, "loading", "the model is loading; retry shortly")
	}
	req, err := s.readRequest(w, r)
	if err != nil {
		return err
	}
	if len(req.Messages) > 0 {
		return errorf(http.StatusBadRequest, "invalid_value", "messages belong to /v1/chat/completions; /v1/completions takes a prompt")
	}
	prompts, ids, err := promptOf(req.Prompt, l.tok)
	if err != nil {
		return err
	}
	rq := &request{prompts: prompts, tokens: ids, stream: req.Stream, echo: req.Echo}
	return s.generate(w, r, l, req, rq, 16)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) *apiError {
	l := s.loaded()
	if l == nil {
		return errorf(http.StatusServiceUnavailable, "loading", "the model is loading; retry shortly")
	}
	req, err := s.readRequest(w, r)
	if err != nil {
		return err
	}
	var prompt string
	if l.chat != nil {
		prompt, err = templatePrompt(l.chat, req.Messages)
	} else {
		prompt, err = chatPrompt(req.Messages)
	}
	if err != nil {
		return err
	}
	if req.Echo {
		return errorf(http.StatusBadRequest, "invalid_value", "echo is a field of /v1/completions")
	}
	switch string(req.Logprobs) {
	case "", "null", "false":
	default:
		return errorf(http.StatusBadRequest, "invalid_value", "logprobs: supported on /v1/completions only")
	}
	rq := &request{chat: true, templated: l.chat != nil, prompts: []string{prompt}, stream: req.Stream}
	return s.generate(w, r, l, req, rq, 256)
}

// generate validates the settings, queues one job per prompt and choice,
// and answers with their text.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, l *loaded, req *completionRequest, rq *request, defMax int) *apiError {
	set, err := req.settings(defMax, l.m.Config().Vocab, rand.Uint64)
	if err != nil {
		return err
	}
	rq.usage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	if rq.chat && !rq.templated {
		set.stop = append(set.stop, chatStop)
	}
	if len(rq.prompts)*set.n > maxChoices { // both at most maxChoices: no overflow
		return errorf(http.StatusBadRequest, "invalid_value", "%d prompts × n=%d choices: at most %d sequences per request", len(rq.prompts), set.n, maxChoices)
	}
	if seqs := len(rq.prompts) * set.n; seqs > s.opts.MaxQueue {
		return errorf(http.StatusBadRequest, "invalid_value", "%d prompts × n=%d choices: %d sequences, more than this server queues at once (%d); ask for fewer choices", len(rq.prompts), set.n, seqs, s.opts.MaxQueue)
	}
	given := rq.tokens
	rq.tokens = nil
	for i, p := range rq.prompts {
		// A template writes the beginning-of-sequence token itself, as
		// transformers' apply_chat_template encodes without special tokens;
		// prompts of token ids are read as they are, as vLLM does.
		var ids []int32
		if given == nil && !rq.templated {
			ids = slices.Clone(l.cfg.Begin)
		}
		rq.begin = append(rq.begin, len(ids))
		if given != nil {
			ids = given[i]
		} else {
			var err *apiError
			if ids, err = encode(r, l.tok, ids, fmt.Sprintf("prompt %d", i), p); err != nil {
				return err
			}
		}
		if len(ids) == 0 {
			if !l.hasEOT {
				return errorf(http.StatusBadRequest, "invalid_value", "prompt %d is empty: this model needs at least one token to start from", i)
			}
			ids = []int32{l.eot} // as documents start after <|endoftext|>
		}
		// The last generated token is never fed back, so prompt and
		// generation may take one position past the limit.
		if len(ids) > l.limit {
			return errorf(http.StatusBadRequest, "context_length_exceeded", "prompt %d has %d tokens, over this model's limit of %d; shorten it", i, len(ids), l.limit)
		}
		if !set.explicit {
			set.maxTokens = min(set.maxTokens, l.limit-len(ids)+1) // a default fits the room left
		}
		// max_tokens comes from the client, up to 2^63-1: compared with
		// the room left rather than added to the prompt, it cannot wrap.
		if set.maxTokens > l.limit-len(ids)+1 {
			return errorf(http.StatusBadRequest, "context_length_exceeded", "prompt %d of %d tokens and max_tokens %d pass this model's limit of %d tokens; ask for max_tokens %d or fewer", i, len(ids), set.maxTokens, l.limit, l.limit-len(ids)+1)
		}
		rq.tokens = append(rq.tokens, ids)
	}
	rq.set = set
	box := newMailbox()
	var jobs []*job
	if rq.jobs() {
		echo := rq.echo && set.logprobs >= 0
		for p, ids := range rq.tokens {
			var offsets []int
			if echo {
				offsets = textOffsets(l.tok, ids, rq.begin[p])
			}
			for c := range set.n {
				idx := p*set.n + c
				offset := 0
				if rq.echo {
					offset = len(rq.prompts[p])
				}
				jobs = append(jobs, &job{
					index: idx, prompt: ids, max: set.maxTokens, limit: l.limit, offset: offset, echo: echo, offsets: offsets,
					sampler: sample.New(set.Settings, rand.New(rand.NewPCG(set.seed, uint64(idx)))),
					text:    newTextStream(set.stop), tok: l.tok, eos: l.cfg.EOS, top: set.logprobs,
					kv: mulSat(l.kvRow, int64(len(ids))+int64(set.maxTokens)), out: box, cache: cacheJob{chat: rq.chat && !rq.templated},
				})
			}
		}
		if err := l.sched.submit(jobs); err != nil {
			switch {
			case errors.Is(err, errQueueFull):
				return errorf(http.StatusTooManyRequests, "queue_full", "server busy: %v; retry later", err)
			case errors.Is(err, errKVMemory):
				return errorf(http.StatusBadRequest, "context_length_exceeded", "%v: ask for fewer tokens", err)
			}
			return errorf(http.StatusServiceUnavailable, "unavailable", "%v", err)
		}
	}
	defer func() {
		// However the request ends, its sequences stop at the next step.
		for _, j := range jobs {
			j.canceled.Store(true)
		}
	}()
	if rq.stream {
		s.stream(w, r, rq, box, len(jobs))
		return nil
	}
	return s.collect(w, r, rq, box, len(jobs))
}

// generationError is the answer to a request whose generation failed
// with err: 503 for a server shutting down, 500 for logits that are not
// finite (a model that overflows) and for bugs.
func generationError(err error) *apiError {
	var nf *sample.NonFiniteError
	switch {
	case errors.Is(err, errClosed):
		return errorf(http.StatusServiceUnavailable, "unavailable", "generation failed: %v", err)
	case errors.As(err, &nf):
		return errorf(http.StatusInternalServerError, "non_finite_logits", "generation failed: %v; the server is still up", err)
	}
	return errorf(http.StatusInternalServerError, "internal_error", "generation failed: %v", err)
}

// promptOf parses the prompt of /v1/completions: a string, a list of
// strings, a list of token ids, or a list of lists of token ids (as
// lm-evaluation-harness sends them). Prompts of token ids come with
// their ids, checked against the vocabulary, and their text decoded.
func promptOf(raw json.RawMessage, tok tokenizer.Tokenizer) ([]string, [][]int32, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, errorf(http.StatusBadRequest, "invalid_value", "prompt is missing")
	}
	var texts []string
	var ids [][]int32
	if list, err := stringOrList("prompt", raw); err == nil {
		texts = list
	} else {
		var one []int64
		var many [][]int64
		switch {
		case json.Unmarshal(raw, &one) == nil:
			many = [][]int64{one}
		case json.Unmarshal(raw, &many) == nil:
		default:
			return nil, nil, errorf(http.StatusBadRequest, "invalid_type", "field prompt: want a string, a list of strings, a list of token ids or a list of lists of them")
		}
		V := tok.VocabSize()
		for i, p := range many {
			t := make([]int32, len(p))
			for j, id := range p {
				if id < 0 || id >= int64(V) {
					param := "prompt"
					e := errorf(http.StatusBadRequest, "invalid_value", "prompt %d, token %d: id %d outside the vocabulary [0, %d)", i, j, id, V)
					e.Param = &param
					return nil, nil, e
				}
				t[j] = int32(id)
			}
			b, _ := tokenizer.Text(tok, nil, t) // checked above; the text as Hugging Face's libraries decode it
			ids, texts = append(ids, t), append(texts, string(b))
		}
	}
	if len(texts) == 0 || len(texts) > maxChoices {
		return nil, nil, errorf(http.StatusBadRequest, "invalid_value", "prompt: %d prompts, want 1 to %d", len(texts), maxChoices)
	}
	return texts, ids, nil
}

// jobs reports whether the request has work for the scheduler: tokens
// to generate, or its prompts' logprobs (echo with logprobs).
func (rq *request) jobs() bool {
	return rq.set.maxTokens > 0 || rq.echo && rq.set.logprobs >= 0
}

// textOffsets returns the byte offset of each token in the text of ids.
// The first begin tokens, put before the prompt by the server, are not
// in its text: at offset 0, they take no room. The tokens decoded one by
// one may make more text than the whole does (a SentencePiece-kind
// encoding puts a space before the text, which tokenizer.Text strips):
// that much is missing at the start of the text, so it is taken off every
// offset, down to 0.
func textOffsets(tok tokenizer.Tokenizer, ids []int32, begin int) []int {
	offsets := make([]int, len(ids))
	var buf []byte
	at := 0
	for i := range ids {
		offsets[i] = at
		if i < begin {
			continue
		}
		buf, _ = tok.Decode(buf[:0], ids[i:i+1]) // ids are checked against the vocabulary
		at += len(buf)
	}
	buf, _ = tokenizer.Text(tok, buf[:0], ids[begin:])
	if extra := at - len(buf); extra > 0 {
		for i := begin; i < len(offsets); i++ {
			offsets[i] = max(offsets[i]-extra, 0)
		}
	}
	return offsets
}

// id returns a fresh response id.
func (s *Server) id(prefix string) string {
	return fmt.Sprintf("%s-%x%06x", prefix, s.created, s.ids.Add(1))
}

// wait returns the next events of box, or nil when the client has gone.
// It computes the events' logprobs, here rather than on the scheduler's
// goroutine.
func wait(r *http.Request, box *mailbox, buf []event) []event {
	for {
		if ev := box.take(buf); len(ev) > 0 {
			for i := range ev {
				if p := ev[i].pending; p != nil {
					ev[i].logprobs, ev[i].pending = p.compute(), nil
				}
			}
			return ev
		}
		select {
		case <-box.ready:
		case <-r.Context().Done():
			return nil
		}
	}
}

// choices is the state of a request's choices as their events arrive.
type choices struct {
	text      []strings.Builder
	logprobs  []*logprobs // nil entries unless asked for
	finish    []string
	generated int
	cached    []int // per prompt, the most any of its choices resumed past
	n         int   // choices per prompt
	left      int
}

func newChoices(rq *request) *choices {
	n := len(rq.prompts) * rq.set.n
	c := &choices{text: make([]strings.Builder, n), logprobs: make([]*logprobs, n), finish: make([]string, n), left: n,
		cached: make([]int, len(rq.prompts)), n: rq.set.n}
	if rq.set.logprobs >= 0 {
		for i := range c.logprobs {
			c.logprobs[i] = &logprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
		}
	}
	if !rq.jobs() {
		for i := range c.finish {
			c.finish[i] = "length"
		}
		c.left = 0
	}
	return c
}

func (c *choices) add(e event) {
	c.text[e.index].WriteString(e.text)
	if e.logprobs != nil && c.logprobs[e.index] != nil {
		c.logprobs[e.index].add(e.logprobs)
	}
	if e.finish != "" {
		c.finish[e.index] = e.finish
		c.generated += e.generated
		p := e.index / max(c.n, 1)
		c.cached[p] = max(c.cached[p], e.cached)
		c.left--
	}
}

func (rq *request) usageOf(c *choices) *usage {
	u := usage{CompletionTokens: c.generated}
	for _, t := range rq.tokens {
		u.PromptTokens += len(t)
	}
	for _, r := range c.cached {
		u.PromptTokensDetails.CachedTokens += r
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return &u
}

// collect answers a request that does not stream, once every choice is
// done.
func (s *Server) collect(w http.ResponseWriter, r *http.Request, rq *request, box *mailbox, jobs int) *apiError {
	c := newChoices(rq)
	var buf []event
	for c.left > 0 {
		buf = wait(r, box, buf)
		if buf == nil {
			return nil // the client went away
		}
		for _, e := range buf {
			if e.err != nil {
				return generationError(e.err)
			}
			c.add(e)
		}
	}
	if d := s.opts.WriteTimeout; d > 0 {
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
	}
	id, now, u := s.id("cmpl"), time.Now().Unix(), rq.usageOf(c)
	if rq.chat {
		resp := chatCompletion{ID: id, Object: "chat.completion", Created: now, Model: s.name(), Usage: u}
		for i := range c.text {
			text := c.text[i].String()
			resp.Choices = append(resp.Choices, chatChoice{Index: i, Message: &chatText{Role: "assistant", Content: &text}, FinishReason: &c.finish[i]})
		}
		writeJSON(w, http.StatusOK, resp)
		return nil
	}
	resp := completion{ID: id, Object: "text_completion", Created: now, Model: s.name(), Usage: u}
	for i := range c.text {
		text := c.text[i].String()
		if rq.echo {
			text = rq.prompts[i/rq.set.n] + text
		}
		resp.Choices = append(resp.Choices, completionChoice{Index: i, Text: text, Logprobs: c.logprobs[i], FinishReason: &c.finish[i]})
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// stream answers a request as server-sent events: a chunk per piece of
// text, a last chunk per choice with its finish reason, the usage if
// asked, then [DONE].
func (s *Server) stream(w http.ResponseWriter, r *http.Request, rq *request, box *mailbox, jobs int) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	id, created := s.id("cmpl"), time.Now().Unix()
	send := func(v any) bool {
		if d := s.opts.WriteTimeout; d > 0 {
			rc.SetWriteDeadline(time.Now().Add(d))
		}
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	chunk := func(index int, text string, lp *logprobs, finish *string, first bool) any {
		if rq.chat {
			d := &chatText{}
			if first {
				d.Role = "assistant"
			}
			if text != "" || first {
				d.Content = &text
			}
			return chatCompletion{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.name(),
				Choices: []chatChoice{{Index: index, Delta: d, FinishReason: finish}}}
		}
		return completion{ID: id, Object: "text_completion", Created: created, Model: s.name(),
			Choices: []completionChoice{{Index: index, Text: text, Logprobs: lp, FinishReason: finish}}}
	}
	n := len(rq.prompts) * rq.set.n
	// Every choice opens with a chunk: the role for chat, the prompt with
	// echo, so that clients see the stream start before the first token.
	for i := range n {
		text := ""
		if rq.echo {
			text = rq.prompts[i/rq.set.n]
		}
		if !send(chunk(i, text, nil, nil, true)) {
			return
		}
	}
	c := newChoices(rq)
	for i := range c.finish {
		if c.finish[i] != "" {
			if !send(chunk(i, "", nil, &c.finish[i], false)) {
				return
			}
		}
	}
	var buf []event
	for c.left > 0 {
		buf = wait(r, box, buf)
		if buf == nil {
			return
		}
		for _, e := range buf {
			if e.err != nil {
				err := generationError(e.err)
				s.reject(r, err)
				send(map[string]any{"error": err})
				return
			}
			c.add(e)
			if (e.text != "" || e.logprobs != nil) && !send(chunk(e.index, e.text, e.logprobs, nil, false)) {
				return
			}
			if e.finish != "" && !send(chunk(e.index, "", nil, &c.finish[e.index], false)) {
				return
			}
		}
	}
	if rq.usage {
		u := rq.usageOf(c)
		if rq.chat {
			send(chatCompletion{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.name(), Choices: []chatChoice{}, Usage: u})
		} else {
			send(completion{ID: id, Object: "text_completion", Created: created, Model: s.name(), Choices: []completionChoice{}, Usage: u})
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	rc.Flush()
}

// mulSat returns a·b for a, b ≥ 0, or the largest int64 where that
// overflows: a size that saturates is refused by any budget.
func mulSat(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}
