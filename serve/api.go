package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/polysketch/polysketch/sample"
)

// The request and response bodies of the OpenAI API, as far as this
// server implements them. Fields clients send that are not listed here
// are ignored, but for those that would change the answer and that the
// server lacks (unsupported): those are refused with 400, naming the
// field. Listed fields of the wrong type are errors.

// completionRequest is the body of POST /v1/completions, and of
// /v1/chat/completions with Messages instead of Prompt.
type completionRequest struct {
	Model               string             `json:"model"`
	Prompt              json.RawMessage    `json:"prompt"`
	Messages            []message          `json:"messages"`
	MaxTokens           *int               `json:"max_tokens"`
	MaxCompletionTokens *int               `json:"max_completion_tokens"`
	Temperature         *float64           `json:"temperature"`
	TopP                *float64           `json:"top_p"`
	TopK                *int               `json:"top_k"`
	Stop                json.RawMessage    `json:"stop"`
	Seed                *int64             `json:"seed"`
	N                   *int               `json:"n"`
	Stream              bool               `json:"stream"`
	StreamOptions       *streamOptions     `json:"stream_options"`
	Echo                bool               `json:"echo"`
	Logprobs            json.RawMessage    `json:"logprobs"`
	PresencePenalty     *float64           `json:"presence_penalty"`
	FrequencyPenalty    *float64           `json:"frequency_penalty"`
	LogitBias           map[string]float64 `json:"logit_bias"`
	BestOf              *int               `json:"best_of"`
	Suffix              *string            `json:"suffix"`
}

// unsupported returns the error for a field of r that asks for what this
// server does not do (best_of beyond 1, a suffix to insert before), as
// llama.cpp answers the fields it lacks: silently ignoring it would
// answer another request than the one sent.
func (r *completionRequest) unsupported() *apiError {
	field := ""
	switch {
	case r.BestOf != nil && *r.BestOf != 1:
		field = "best_of"
	case r.Suffix != nil && *r.Suffix != "":
		field = "suffix"
	default:
		return nil
	}
	e := errorf(http.StatusBadRequest, "unsupported_parameter", "%s is not supported by this server; leave it out (see the supported fields in the documentation of polysketch serve)", field)
	e.Param = &field
	return e
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// message is one turn of a chat.
type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // a string, or a list of {"type": "text", "text": ...} parts
}

// text returns the message's content as one string.
func (m message) text() (string, bool) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", true
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) != nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", false
		}
		b.WriteString(p.Text)
	}
	return b.String(), true
}

// usage counts a request's tokens.
type usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
}

// promptTokensDetails says how many prompt tokens the prefix cache spared
// reading.
type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// completion is the response of /v1/completions and each of its streamed
// chunks (Object "text_completion" both).
type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *logprobs `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// logprobs are the log-probabilities of a choice's tokens (legacy
// completions format): each token (with echo, the prompt's first), its
// log-probability under the model (before temperature, top-k and top-p),
// the most likely alternatives at its position, and its byte offset in
// the choice's text. The prompt's first token has null for both, as
// nothing predicts it.
type logprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

func (l *logprobs) add(o *logprobs) {
	l.Tokens = append(l.Tokens, o.Tokens...)
	l.TokenLogprobs = append(l.TokenLogprobs, o.TokenLogprobs...)
	l.TopLogprobs = append(l.TopLogprobs, o.TopLogprobs...)
	l.TextOffset = append(l.TextOffset, o.TextOffset...)
}

// chatCompletion is the response of /v1/chat/completions (Object
// "chat.completion") and each streamed chunk ("chat.completion.chunk",
// with Delta instead of Message).
type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

type chatChoice struct {
	Index        int       `json:"index"`
	Message      *chatText `json:"message,omitempty"`
	Delta        *chatText `json:"delta,omitempty"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatText struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// apiError is an error answered as {"error": {...}} with an HTTP status.
type apiError struct {
	status  int
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

// errorf returns an apiError of the given status; code may be "".
func errorf(status int, code, format string, args ...any) *apiError {
	e := &apiError{status: status, Message: fmt.Sprintf(format, args...), Type: errorType(status)}
	if code != "" {
		e.Code = &code
	}
	return e
}

func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// decodeError explains a failure of json.Unmarshal on a request body.
func decodeError(err error) *apiError {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "the body"
		}
		want := jsonType(te.Type.Kind().String())
		if integer(te.Type.Kind().String()) && strings.HasPrefix(te.Value, "number") {
			// A number, but not one an int holds: a fraction, or too large.
			want = "an integer from -2^63 to 2^63-1"
			if strings.HasPrefix(te.Type.Kind().String(), "u") {
				want = "an integer from 0 to 2^64-1"
			}
		}
		return errorf(http.StatusBadRequest, "invalid_type", "field %s: got a JSON %s, want %s", field, te.Value, want)
	case errors.As(err, &se):
		return errorf(http.StatusBadRequest, "invalid_json", "malformed JSON at byte %d: %v", se.Offset, err)
	}
	return errorf(http.StatusBadRequest, "invalid_json", "malformed JSON: %v", err)
}

// integer reports whether a reflect.Kind's name is an integer kind.
func integer(kind string) bool {
	return strings.HasPrefix(kind, "int") || strings.HasPrefix(kind, "uint")
}

func jsonType(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"), strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	case kind == "slice":
		return "a list"
	case kind == "struct", kind == "map":
		return "an object"
	}
	return "another type"
}

// stringOrList parses a field that is a string or a list of strings
// (prompt, stop); null or absent gives nil.
func stringOrList(field string, raw json.RawMessage) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return list, nil
	}
	return nil, errorf(http.StatusBadRequest, "invalid_type", "field %s: want a string or a list of strings", field)
}

// sampling is a request's validated generation settings.
type sampling struct {
	sample.Settings
	maxTokens int
	stop      []string
	seed      uint64
	n         int
	logprobs  int  // alternatives per position; -1 for no logprobs
	explicit  bool // max_tokens was given, rather than defaulted
}

// maxStops bounds the stop strings of a request, as OpenAI does.
const maxStops = 4

// maxLogprobs bounds the alternatives of logprobs, as OpenAI does.
const maxLogprobs = 5

// maxChoices bounds n, and the sequences of a request.
const maxChoices = 16

// MaxChoices is the most sequences one request may ask for (prompts × n):
// a server queueing fewer than that could never take such a request.
const MaxChoices = maxChoices

// settings validates the sampling fields of r for a vocabulary of vocab
// tokens; defMax is the max_tokens of a request that sets none.
func (r *completionRequest) settings(defMax, vocab int, seed func() uint64) (sampling, *apiError) {
	s := sampling{Settings: sample.Settings{Temperature: 1, TopP: 1}, maxTokens: defMax, n: 1, logprobs: -1}
	bad := func(format string, args ...any) (sampling, *apiError) {
		return s, errorf(http.StatusBadRequest, "invalid_value", format, args...)
	}
	if err := r.unsupported(); err != nil {
		return s, err
	}
	if r.MaxTokens == nil {
		r.MaxTokens = r.MaxCompletionTokens
	}
	if r.MaxTokens != nil {
		if *r.MaxTokens < 0 {
			return bad("max_tokens %d: must be 0 or more", *r.MaxTokens)
		}
		s.maxTokens, s.explicit = *r.MaxTokens, true
	}
	set := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&s.Temperature, r.Temperature)
	set(&s.TopP, r.TopP)
	set(&s.PresencePenalty, r.PresencePenalty)
	set(&s.FrequencyPenalty, r.FrequencyPenalty)
	if r.TopK != nil {
		s.TopK = *r.TopK
	}
	if len(r.LogitBias) > 0 {
		s.LogitBias = make(map[int32]float64, len(r.LogitBias))
		for k, v := range r.LogitBias {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil {
				return bad("logit_bias: key %q is not a token id: want {\"token id\": bias, ...}", k)
			}
			s.LogitBias[int32(id)] = v
		}
	}
	if err := s.Settings.Validate(vocab); err != nil {
		var se *sample.SettingError
		if errors.As(err, &se) {
			e := errorf(http.StatusBadRequest, "invalid_value", "%v", err)
			e.Param = &se.Field
			return s, e
		}
		return bad("%v", err)
	}
	if r.N != nil {
		if *r.N < 1 || *r.N > maxChoices {
			return bad("n %d: must be between 1 and %d", *r.N, maxChoices)
		}
		s.n = *r.N
	}
	stop, err := stringOrList("stop", r.Stop)
	if err != nil {
		return s, err
	}
	if len(stop) > maxStops {
		return bad("stop: %d strings, at most %d", len(stop), maxStops)
	}
	s.stop = stop
	if r.Seed != nil {
		s.seed = uint64(*r.Seed)
	} else {
		s.seed = seed()
	}
	s.logprobs = -1
	switch raw := string(r.Logprobs); raw {
	case "", "null", "false":
	default:
		var k int
		if json.Unmarshal(r.Logprobs, &k) != nil || k < 0 || k > maxLogprobs {
			return bad("logprobs %s: want a number of alternatives from 0 to %d", raw, maxLogprobs)
		}
		s.logprobs = k
	}
	return s, nil
}

// chatPrompt renders messages in the plain-text chat template:
//
//	System: <content>
//	User: <content>
//	Assistant: <content>
//	…
//	Assistant:
//
// one line per turn (a turn's own newlines kept), ending with the
// assistant's cue; generation stops at a new "User:" line. Content that
// starts with a space follows the colon directly (see turnContent). A base model
// has never seen a chat template: this one only makes the conversation
// read like a transcript it can continue.
func chatPrompt(msgs []message) (string, *apiError) {
	if len(msgs) == 0 {
		return "", errorf(http.StatusBadRequest, "invalid_value", "messages: empty; send at least one {\"role\": \"user\", \"content\": ...}")
	}
	var b strings.Builder
	for i, m := range msgs {
		var name string
		switch m.Role {
		case "system", "developer":
			name = "System"
		case "user":
			name = "User"
		case "assistant":
			name = "Assistant"
		default:
			p := fmt.Sprintf("messages[%d].role", i)
			e := errorf(http.StatusBadRequest, "invalid_value", "%s %q: want system, user or assistant", p, m.Role)
			e.Param = &p
			return "", e
		}
		text, ok := m.text()
		if !ok {
			p := fmt.Sprintf("messages[%d].content", i)
			e := errorf(http.StatusBadRequest, "invalid_value", "%s: want a string or a list of text parts", p)
			e.Param = &p
			return "", e
		}
		fmt.Fprintf(&b, "%s:%s\n", name, turnContent(text))
	}
	b.WriteString("Assistant:")
	return b.String(), nil
}

// chatStop is the stop string the chat template adds: the next user turn.
const chatStop = "\nUser:"
