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

// POST /tokenize and POST /detokenize, in llama.cpp's form, so that
// clients can count a prompt's tokens before sending it:
//
//	POST /tokenize   {"content": "Hello world", "add_special": false, "with_pieces": false}
//	              →  {"tokens": [15496, 995]}
//	with_pieces   →  {"tokens": [{"id": 15496, "piece": "Hello"}, {"id": 995, "piece": " world"}]}
//	POST /detokenize {"tokens": [15496, 995]}  →  {"content": "Hello world"}
//
// A piece that is not valid UTF-8 on its own (part of a character) is a
// list of its bytes, as llama.cpp gives it. Neither tokenizer has a
// beginning-of-sequence token, so add_special adds nothing.

type tokenizeRequest struct {
	Content    *string `json:"content"`
	AddSpecial bool    `json:"add_special"`
	WithPieces bool    `json:"with_pieces"`
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
	if req.Content == nil {
		return errorf(http.StatusBadRequest, "invalid_value", "content is missing: send {\"content\": \"text\"}")
	}
	var ids []int32
	if req.AddSpecial {
		ids = slices.Clone(l.cfg.Begin) // as a completion's prompt starts
	}
	ids = l.tok.Encode(ids, []byte(*req.Content))
	if !req.WithPieces {
		if ids == nil {
			ids = []int32{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"tokens": ids})
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
	writeJSON(w, http.StatusOK, map[string]string{"content": string(b)})
	return nil
}
