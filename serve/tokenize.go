package serve

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/polysketch/polysketch/data/tokenizer"
)

// POST /tokenize and POST /detokenize, in llama.cpp's form and in
// vLLM's, so that clients can count a prompt's tokens before sending it,
// and lm-evaluation-harness can use the server's tokenizer (its "remote"
// tokenizer: GET /tokenizer_info, then these two in vLLM's form):
//
//	POST /tokenize   {"content": "Hello world", "add_special": false, "with_pieces": false}
//	              →  {"tokens": [15496, 995]}
//	with_pieces   →  {"tokens": [{"id": 15496, "piece": "Hello"}, {"id": 995, "piece": " world"}]}
//	POST /tokenize   {"prompt": "Hello world", "add_special_tokens": false}
//	              →  {"tokens": [15496, 995], "count": 2, "max_model_len": 4096}
//	POST /detokenize {"tokens": [15496, 995]}  →  {"content": "Hello world", "prompt": "Hello world"}
//	GET /tokenizer_info → {"tokenizer_class": "gpt2", "eos_token": "<|endoftext|>", "bos_token": null, …}
//
// A piece that is not valid UTF-8 on its own (part of a character) is a
// list of its bytes, as llama.cpp gives it. Neither tokenizer has a
// beginning-of-sequence token, so add_special adds nothing. Text is
// encoded as it is: "<|endoftext|>" in a prompt is text, not the token.

type tokenizeRequest struct {
	Content          *string `json:"content"`
	Prompt           *string `json:"prompt"` // vLLM's name for content
	AddSpecial       bool    `json:"add_special"`
	AddSpecialTokens *bool   `json:"add_special_tokens"` // vLLM's; true unless given
	WithPieces       bool    `json:"with_pieces"`
}

type detokenizeRequest struct {
	Tokens []int64 `json:"tokens"`
}

// piece is a token of /tokenize with_pieces: Piece is a string, or the
// token's bytes ([]int) when they are not valid UTF-8.
type piece struct {
	ID    int32 `json:"id"`
	Piece any   `json:"piece"`
}

// encode appends to dst the tokens of the text of field what of request r. A
// tokenizer whose pre-tokenizer pattern gives up on the text is answered
// with 400, as the text is what the client can change; a client that went
// away, with 499 (nginx's "client closed request"), which only the
// metrics and the log see.
func encode(r *http.Request, tok tokenizer.Tokenizer, dst []int32, what, text string) ([]int32, *apiError) {
	ids, err := tok.Encode(r.Context(), dst, []byte(text))
	var pe *tokenizer.PatternError
	switch {
	case err == nil:
		return ids, nil
	case r.Context().Err() != nil:
		return nil, errorf(statusClientClosed, "client_closed", "the client went away while %s was tokenized", what)
	case errors.As(err, &pe):
		return nil, errorf(http.StatusBadRequest, "tokenization_failed", "%s cannot be tokenized: %v", what, err)
	}
	return nil, errorf(http.StatusInternalServerError, "internal_error", "tokenizing %s: %v", what, err)
}

// statusClientClosed is the status of a request whose client went away
// before its answer: it counts the request apart from those answered.
const statusClientClosed = 499

// readBody reads a request body of at most MaxBody bytes and decodes it
// into v.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return errorf(http.StatusRequestEntityTooLarge, "request_too_large", "request body over %d bytes", s.opts.MaxBody)
		}
		return errorf(http.StatusBadRequest, "invalid_body", "reading the request body: %v", err)
	}
	if !utf8.Valid(body) {
		return errorf(http.StatusBadRequest, "invalid_encoding", "the request body is not valid UTF-8")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return decodeError(err)
	}
	return nil
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) *apiError {
	l := s.loaded()
	if l == nil {
		return errorf(http.StatusServiceUnavailable, "loading", "the model is loading; retry shortly")
	}
	var req tokenizeRequest
	if err := s.readBody(w, r, &req); err != nil {
		return err
	}
	vllm := req.Content == nil && req.Prompt != nil
	switch {
	case req.Content == nil && req.Prompt == nil:
		return errorf(http.StatusBadRequest, "invalid_value", "content is missing: send {\"content\": \"text\"} (or vLLM's {\"prompt\": \"text\"})")
	case req.Content != nil && req.Prompt != nil && *req.Content != *req.Prompt:
		return errorf(http.StatusBadRequest, "invalid_value", "content and prompt differ: send one of them")
	case vllm:
		req.Content = req.Prompt
	}
	if req.AddSpecialTokens != nil {
		req.AddSpecial = req.AddSpecial || *req.AddSpecialTokens
	} else if vllm {
		req.AddSpecial = true // vLLM's default
	}
	var ids []int32
	if req.AddSpecial {
		ids = slices.Clone(l.cfg.Begin) // as a completion's prompt starts
	}
	ids, err := encode(r, l.tok, ids, "content", *req.Content)
	if err != nil {
		return err
	}
	if !req.WithPieces {
		if ids == nil {
			ids = []int32{}
		}
		resp := map[string]any{"tokens": ids}
		if vllm {
			resp["count"], resp["max_model_len"] = len(ids), l.limit
		}
		writeJSON(w, http.StatusOK, resp)
		return nil
	}
	pieces := make([]piece, len(ids))
	var buf []byte
	for i, id := range ids {
		var err error
		if buf, err = l.tok.Decode(buf[:0], []int32{id}); err != nil {
			return errorf(http.StatusInternalServerError, "internal_error", "decode token %d: %v", id, err)
		}
		pieces[i] = piece{ID: id, Piece: pieceOf(buf)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": pieces})
	return nil
}

// pieceOf is a token's bytes as /tokenize shows them: a string when they
// are valid UTF-8, else the list of the bytes' values.
func pieceOf(b []byte) any {
	if utf8.Valid(b) {
		return string(b)
	}
	v := make([]int, len(b))
	for i, c := range b {
		v[i] = int(c)
	}
	return v
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) *apiError {
	l := s.loaded()
	if l == nil {
		return errorf(http.StatusServiceUnavailable, "loading", "the model is loading; retry shortly")
	}
	var req detokenizeRequest
	if err := s.readBody(w, r, &req); err != nil {
		return err
	}
	// The ids' count is bounded by the body's size; each is checked
	// before it is used.
	ids := make([]int32, len(req.Tokens))
	V := l.tok.VocabSize()
	for i, id := range req.Tokens {
		if id < 0 || id >= int64(V) {
			p := "tokens"
			e := errorf(http.StatusBadRequest, "invalid_value", "tokens[%d] = %d: outside the vocabulary [0, %d)", i, id, V)
			e.Param = &p
			return e
		}
		ids[i] = int32(id)
	}
	// The text as Hugging Face's libraries decode it: less the space a
	// SentencePiece-kind tokenizer put before the text.
	b, err := tokenizer.Text(l.tok, nil, ids)
	if err != nil {
		return errorf(http.StatusBadRequest, "invalid_value", "%v", err)
	}
	// Bytes that are not valid UTF-8 (a character cut between tokens)
	// become U+FFFD, as JSON strings must be Unicode.
	writeJSON(w, http.StatusOK, map[string]string{"content": string(b), "prompt": string(b)})
	return nil
}

// tokenizerInfo answers GET /tokenizer_info as vLLM does, as far as
// lm-evaluation-harness reads it: the special tokens' text (null where
// the tokenizer has none) and the most positions of a sequence.
func (s *Server) tokenizerInfo(w http.ResponseWriter, r *http.Request) *apiError {
	l := s.loaded()
	if l == nil {
		return errorf(http.StatusServiceUnavailable, "loading", "the model is loading; retry shortly")
	}
	var eos *string
	if l.hasEOT {
		b, err := l.tok.Decode(nil, []int32{l.eot})
		if err != nil {
			return errorf(http.StatusInternalServerError, "internal_error", "decode the end-of-text token: %v", err)
		}
		e := string(b)
		eos = &e
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"tokenizer_class": l.tok.Name(), "eos_token": eos, "bos_token": nil, "pad_token": nil,
		"model_max_length": l.limit, "vocab_size": l.tok.VocabSize(),
	})
	return nil
}
