package serve

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/data/tokenizer"
)

func TestTokenize(t *testing.T) {
	gpt2, err := tokenizer.GPT2()
	if err != nil {
		t.Fatal(err)
	}
	c := testConfig()
	c.Vocab = gpt2.VocabSize()
	gs := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := gs.Ready(testModel(t, c), gpt2); err != nil {
		t.Fatal(err)
	}
	gURL := httptestServer(t, gs)
	_, bs := newTest(t, Options{}, nil)
	for _, tc := range []struct {
		name, url, path, body, want string
	}{
		{"gpt2", gURL, "/tokenize", `{"content":"Hello world"}`, `{"tokens":[15496,995]}`},
		{"gpt2 add_special", gURL, "/tokenize", `{"content":"Hello world","add_special":true}`, `{"tokens":[15496,995]}`},
		{"gpt2 pieces", gURL, "/tokenize", `{"content":"Hello world","with_pieces":true}`, `{"tokens":[{"id":15496,"piece":"Hello"},{"id":995,"piece":" world"}]}`},
		{"gpt2 empty", gURL, "/tokenize", `{"content":""}`, `{"tokens":[]}`},
		{"gpt2 detokenize", gURL, "/detokenize", `{"tokens":[15496,995]}`, `{"content":"Hello world","prompt":"Hello world"}`},
		{"gpt2 end of text", gURL, "/detokenize", `{"tokens":[50256]}`, `{"content":"<|endoftext|>","prompt":"<|endoftext|>"}`},
		{"detokenize nothing", gURL, "/detokenize", `{"tokens":[]}`, `{"content":"","prompt":""}`},
		// vLLM's form, which lm-evaluation-harness's remote tokenizer sends.
		{"gpt2 vllm", gURL, "/tokenize", `{"prompt":"Hello world","add_special_tokens":false}`, `{"tokens":[15496,995],"count":2,"max_model_len":4096}`},
		{"gpt2 both", gURL, "/tokenize", `{"prompt":"Hello world","content":"Hello world"}`, `{"tokens":[15496,995]}`},
		{"gpt2 tokenizer_info", gURL, "/tokenizer_info", "", `{"tokenizer_class":"gpt2","eos_token":"<|endoftext|>","bos_token":null,"pad_token":null,"model_max_length":4096,"vocab_size":50257}`},
		{"byte tokenizer_info", bs.URL, "/tokenizer_info", "", `{"tokenizer_class":"byte","eos_token":null,"bos_token":null,"pad_token":null,"model_max_length":4096,"vocab_size":256}`},
		{"byte", bs.URL, "/tokenize", `{"content":"hé"}`, `{"tokens":[104,195,169]}`},
		// A piece that is part of a character is its bytes, as llama.cpp has it.
		{"byte pieces", bs.URL, "/tokenize", `{"content":"hé","with_pieces":true}`, `{"tokens":[{"id":104,"piece":"h"},{"id":195,"piece":[195]},{"id":169,"piece":[169]}]}`},
		{"byte detokenize", bs.URL, "/detokenize", `{"tokens":[104,195,169]}`, `{"content":"hé","prompt":"hé"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "POST"
			if tc.body == "" {
				method = "GET"
			}
			code, h, b := call(t, method, tc.url+tc.path, tc.body)
			var got, want any
			json.Unmarshal(b, &got)
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if code != 200 || !reflect.DeepEqual(got, want) || h.Get("Content-Type") != "application/json" {
				t.Errorf("%s %s: %d %s, want 200 %s", tc.path, tc.body, code, b, tc.want)
			}
		})
	}
	// The count /tokenize gives is the prompt_tokens of a completion.
	prompt := "func main() { fmt.Println(\"héllo\") }"
	body, _ := json.Marshal(map[string]any{"content": prompt})
	_, _, b := call(t, "POST", gURL+"/tokenize", string(body))
	var tok struct{ Tokens []int32 }
	if err := json.Unmarshal(b, &tok); err != nil {
		t.Fatal(err)
	}
	body, _ = json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1})
	got := complete(t, gURL, string(body))
	if got.Usage.PromptTokens != len(tok.Tokens) {
		t.Errorf("/tokenize gives %d tokens, the completion counts %d", len(tok.Tokens), got.Usage.PromptTokens)
	}
}

func TestTokenizeBadRequests(t *testing.T) {
	_, ts := newTest(t, Options{MaxBody: 1000}, nil)
	for _, tc := range []struct {
		name, path, body string
		code             int
		contains         string
	}{
		{"no content", "/tokenize", `{}`, 400, "content is missing"},
		{"content and prompt", "/tokenize", `{"content":"a","prompt":"b"}`, 400, "content and prompt differ"},
		{"content type", "/tokenize", `{"content":5}`, 400, "field content: got a JSON number, want a string"},
		{"malformed", "/tokenize", `{"content":`, 400, "malformed JSON"},
		{"too large", "/tokenize", `{"content":"` + strings.Repeat("x", 2000) + `"}`, 413, "over 1000 bytes"},
		{"id too large", "/detokenize", `{"tokens":[1,256]}`, 400, "tokens[1] = 256: outside the vocabulary [0, 256)"},
		{"negative id", "/detokenize", `{"tokens":[-1]}`, 400, "tokens[0] = -1: outside the vocabulary"},
		{"id beyond int64", "/detokenize", `{"tokens":[1e30]}`, 400, "want an integer"},
		{"fractional id", "/detokenize", `{"tokens":[1.5]}`, 400, "want an integer"},
		{"id not a number", "/detokenize", `{"tokens":["a"]}`, 400, "want a number"},
		{"tokens not a list", "/detokenize", `{"tokens":7}`, 400, "want a list"},
		{"GET", "/tokenize", ``, 405, "use POST"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "POST"
			if tc.body == "" {
				method = "GET"
			}
			code, _, b := call(t, method, ts.URL+tc.path, tc.body)
			msg, _ := errorOf(t, b)
			if code != tc.code || !strings.Contains(msg, tc.contains) {
				t.Errorf("status %d %q, want %d containing %q", code, msg, tc.code, tc.contains)
			}
		})
	}
	complete(t, ts.URL, `{"prompt":"a","max_tokens":2}`) // still serving
}

func TestTokenizeLoading(t *testing.T) {
	url := httptestServer(t, New(Options{}))
	for _, path := range []string{"/tokenize", "/detokenize"} {
		code, _, b := call(t, "POST", url+path, `{"content":"a","tokens":[1]}`)
		if code != http.StatusServiceUnavailable {
			t.Errorf("%s while loading: %d %s, want 503", path, code, b)
		}
	}
}
