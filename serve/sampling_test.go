package serve

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/sample"
)

// TestLogitBias bans all but a few tokens, and favours one, through the
// API: the text must hold only what the bias allows.
func TestLogitBias(t *testing.T) {
	_, ts := newTest(t, Options{}, nil)
	allowed := "xyz"
	bias := map[string]float64{}
	for b := range 256 {
		if !strings.ContainsRune(allowed, rune(b)) {
			bias[fmt.Sprint(b)] = -100
		}
	}
	body, _ := json.Marshal(map[string]any{"prompt": "abc", "max_tokens": 40, "temperature": 1.5, "seed": 3, "logit_bias": bias})
	got := complete(t, ts.URL, string(body)).Choices[0].Text
	if len(got) != 40 || strings.Trim(got, allowed) != "" {
		t.Errorf("text %q with every token but %q banned", got, allowed)
	}
	body, _ = json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "max_tokens": 20, "seed": 3, "logit_bias": map[string]float64{"113": 100}})
	code, _, b := call(t, "POST", ts.URL+"/v1/chat/completions", string(body))
	var chat chatCompletion
	if code != http.StatusOK || json.Unmarshal(b, &chat) != nil || *chat.Choices[0].Message.Content != strings.Repeat("q", 20) {
		t.Errorf("chat with a bias of 100 on q: %d %s, want 20 q's", code, b)
	}
}

// TestPenalties checks that presence_penalty and frequency_penalty reach
// the sampler: a greedy request with them gives the tokens that greedy
// decoding with the same penalties gives, not those without.
func TestPenalties(t *testing.T) {
	m := testModel(t, testConfig())
	_, ts := newTest(t, Options{}, m)
	const prompt, n = "func main() {", 30
	// Printable ASCII only, so that the text is the bytes of the tokens.
	ascii := map[string]float64{}
	bias := map[int32]float64{}
	for b := range 256 {
		if b < ' ' || b > '~' {
			ascii[fmt.Sprint(b)], bias[int32(b)] = -100, -100
		}
	}
	req := func(set sample.Settings) string {
		b, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": n, "temperature": 0, "logit_bias": ascii,
			"presence_penalty": set.PresencePenalty, "frequency_penalty": set.FrequencyPenalty})
		return complete(t, ts.URL, string(b)).Choices[0].Text
	}
	plain := req(sample.Settings{})
	for _, set := range []sample.Settings{{PresencePenalty: 1.5}, {FrequencyPenalty: 0.8}, {PresencePenalty: 0.5, FrequencyPenalty: 0.5}} {
		got := req(set)
		set.TopP, set.LogitBias = 1, bias
		if want := decodeGreedy(t, m, prompt, n, set); got != want {
			t.Errorf("%+v: %q, want %q", set, got, want)
		}
		if got == plain {
			t.Errorf("%+v: the same text as without penalties: %q", set, got)
		}
	}
}

// decodeGreedy generates n tokens after prompt with a decoder of m and a
// sampler of set.
func decodeGreedy(t *testing.T, m *model.Model, prompt string, n int, set sample.Settings) string {
	t.Helper()
	dec, err := m.NewDecoder(1)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := dec.Prefill(byteIDs(prompt))
	if err != nil {
		t.Fatal(err)
	}
	s := sample.New(set, rand.New(rand.NewPCG(1, 1)))
	var out []byte
	for range n {
		id, err := s.Next(logits.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, byte(id))
		if logits, err = dec.Step([]int32{id}); err != nil {
			t.Fatal(err)
		}
	}
	return string(out)
}

// TestSamplingErrors checks the fields refused with 400 and the field
// named: settings out of range, and what the server does not do.
func TestSamplingErrors(t *testing.T) {
	_, ts := newTest(t, Options{}, nil)
	for _, tc := range []struct {
		body, param, want string
	}{
		{`{"prompt":"a","presence_penalty":2.5}`, "presence_penalty", "presence_penalty 2.5: must be between -2 and 2"},
		{`{"prompt":"a","frequency_penalty":-3}`, "frequency_penalty", "frequency_penalty -3"},
		{`{"prompt":"a","logit_bias":{"256":1}}`, "logit_bias", "logit_bias token 256: not a token of the vocabulary [0, 256)"},
		{`{"prompt":"a","logit_bias":{"12":-150}}`, "logit_bias", "logit_bias of token 12: -150: must be between -100 and 100"},
		{`{"prompt":"a","logit_bias":{"x":1}}`, "", `logit_bias: key "x" is not a token id`},
		{`{"prompt":"a","top_p":0}`, "top_p", "top_p 0: must be in (0, 1]"},
		{`{"prompt":"a","best_of":3}`, "best_of", "best_of is not supported"},
		{`{"prompt":"a","suffix":"}"}`, "suffix", "suffix is not supported"},
		{`{"messages":[{"role":"user","content":"a"}],"presence_penalty":9}`, "presence_penalty", "presence_penalty 9"},
	} {
		path := "/v1/completions"
		if strings.Contains(tc.body, "messages") {
			path = "/v1/chat/completions"
		}
		code, _, b := call(t, "POST", ts.URL+path, tc.body)
		var e struct{ Error apiError }
		json.Unmarshal(b, &e)
		param := ""
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		if code != http.StatusBadRequest || !strings.Contains(e.Error.Message, tc.want) || param != tc.param {
			t.Errorf("%s: %d %s, want 400 with param %q and %q", tc.body, code, b, tc.param, tc.want)
		}
	}
	// What asks for nothing more is no error.
	complete(t, ts.URL, `{"prompt":"a","max_tokens":2,"best_of":1,"suffix":"","logit_bias":{},"presence_penalty":0}`)
}

// TestNonFiniteLogits serves a model whose output layer overflows (every
// weight 3e38, finite): requests must fail with 500 and an OpenAI-style
// error, streams with an error event, each counted in a metric, and the
// server must go on answering.
func TestNonFiniteLogits(t *testing.T) {
	m := testModel(t, testConfig())
	for _, p := range m.Params() {
		if p.Name == "head.weight" {
			for i := range p.Value.Data {
				p.Value.Data[i] = 3e38
			}
		}
	}
	s, ts := newTest(t, Options{}, m)
	for _, body := range []string{`{"prompt":"abc","max_tokens":3}`, `{"prompt":"abc","max_tokens":3,"logprobs":2,"temperature":0}`} {
		code, _, b := call(t, "POST", ts.URL+"/v1/completions", body)
		var e struct{ Error apiError }
		if code != http.StatusInternalServerError || json.Unmarshal(b, &e) != nil || e.Error.Code == nil || *e.Error.Code != "non_finite_logits" ||
			e.Error.Type != "server_error" || !strings.Contains(e.Error.Message, "not finite") {
			t.Errorf("%s: %d %s, want 500 with code non_finite_logits", body, code, b)
		}
	}
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"abc","max_tokens":3,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = d
		}
	}
	resp.Body.Close()
	if !strings.Contains(last, `"code":"non_finite_logits"`) {
		t.Errorf("stream ends with %s, want an error event with code non_finite_logits", last)
	}
	if n := metricValue(t, s, "polysketch_nonfinite_logits_total"); n != 3 {
		t.Errorf("polysketch_nonfinite_logits_total %v, want 3", n)
	}
	if n := labeledValue(t, s, "polysketch_rejected_requests_total", "reason", "non_finite_logits"); n != 3 {
		t.Errorf("%v requests rejected as non_finite_logits, want 3", n)
	}
	if code, _, b := call(t, "POST", ts.URL+"/tokenize", `{"content":"abc"}`); code != http.StatusOK {
		t.Errorf("after the failures, /tokenize: %d %s", code, b)
	}
}
