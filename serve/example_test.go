package serve_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/serve"
)

// Example serves an (untrained) model and asks it for a completion, as
// any OpenAI client would.
func Example() {
	m, err := model.New(model.DefaultConfig())
	if err != nil {
		panic(err)
	}
	srv := serve.New(serve.Options{Name: "tiny"})
	if err := srv.Ready(m, tokenizer.Byte); err != nil {
		panic(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv) // or http.ListenAndServe("127.0.0.1:8080", srv)
	defer ts.Close()

	resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model": "tiny", "prompt": "func main() {", "max_tokens": 8, "seed": 1}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var c struct {
		Object  string
		Choices []struct {
			Text         string
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		panic(err)
	}
	fmt.Println(resp.StatusCode, c.Object, c.Choices[0].FinishReason, c.Usage.PromptTokens, c.Usage.CompletionTokens)
	// Output: 200 text_completion length 13 8
}
