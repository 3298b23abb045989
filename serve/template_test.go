package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/polysketch/polysketch/data/tokenizer"
)

// TestChatTemplates renders conversations with the real chat templates of
// SmolLM2, Qwen2.5 and Llama 3.2 and compares the text with
// testdata/chat/expected.json, which @huggingface/jinja rendered (chat.sh
// checks that it still does).
func TestChatTemplates(t *testing.T) {
	dir := filepath.Join("testdata", "chat")
	var cases struct {
		Templates map[string]struct {
			File string            `json:"file"`
			Vars map[string]string `json:"vars"`
		} `json:"templates"`
		Conversations map[string][]struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"conversations"`
	}
	var expected map[string]map[string]string
	for name, v := range map[string]any{"cases.json": &cases, "expected.json": &expected} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	for name, tc := range cases.Templates {
		src, err := os.ReadFile(filepath.Join(dir, tc.File))
		if err != nil {
			t.Fatal(err)
		}
		cfg := &tokenizer.Config{ChatTemplate: string(src), BOSText: tc.Vars["bos_token"], EOSText: tc.Vars["eos_token"], Special: map[string]string{}}
		for k, v := range tc.Vars {
			cfg.Special[k] = v
		}
		c, err := newChatTemplate(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for conv, msgs := range cases.Conversations {
			var list []chatMessage
			for _, m := range msgs {
				list = append(list, chatMessage{m.Role, m.Content})
			}
			want, ok := expected[name][conv]
			if !ok {
				t.Fatalf("expected.json has no %s / %s", name, conv)
			}
			got, aerr := c.render(list)
			if aerr != nil {
				t.Errorf("%s, %s: %s", name, conv, aerr.Message)
			} else if got != want {
				t.Errorf("%s, %s:\ngot  %q\nwant %q", name, conv, got, want)
			}
		}
	}
}

// TestChatTemplateErrors checks that bad templates are refused when the
// model loads, in one line, and that what a template raises on a
// conversation is a 400 with its message, any other failure a 500.
func TestChatTemplateErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"syntax", "{% if messages %}unclosed", "unclosed if"},
		{"raises always", "{{ raise_exception('no') }}", "does not render: the model's chat template refuses this conversation: no"},
		{"recursion", "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "macro f is called inside a macro defined before it, or inside itself"},
		{"mutual recursion", "{% macro f() %}{{ g() }}{% endmacro %}{% macro g() %}{{ f() }}{% endmacro %}{{ f() }}", "macro g is called inside a macro defined before it"},
		{"macro as a value", "{% set ns = namespace() %}{% macro f() %}{{ ns.g() }}{% endmacro %}{% set ns.g = f %}{{ f() }}", "macro f is used as a value"},
		{"defined twice", "{% macro f() %}a{% endmacro %}{% macro f() %}b{% endmacro %}", "macro f is defined twice"},
		{"huge range", "{% for i in range(1000000000) %}{% endfor %}", "range: more than 100000 numbers"},
		{"open tag", "{{ messages", "not closed"},
	} {
		_, err := newChatTemplate(&tokenizer.Config{ChatTemplate: tc.src})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error = %v, want one line containing %q", tc.name, err, tc.want)
		}
	}
	// Macros that call macros defined before them, and names in strings,
	// are fine.
	ok := "{% macro a(x) %}[{{ x }}]{% endmacro %}{% macro b(x) %}{{ a(x) ~ a(x) }}{% endmacro %}{% for m in messages %}{{ b(m.content) ~ 'b(' }}{% endfor %}"
	c, err := newChatTemplate(&tokenizer.Config{ChatTemplate: ok})
	if err != nil {
		t.Fatal(err)
	}
	if got, aerr := c.render([]chatMessage{{"user", "x"}}); aerr != nil || got != "[x][x]b(" {
		t.Errorf("render = %q, %v", got, aerr)
	}

	alternate := "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{{ m.content }}{% endfor %}"
	c, err = newChatTemplate(&tokenizer.Config{ChatTemplate: alternate})
	if err != nil {
		t.Fatal(err)
	}
	_, aerr := c.render([]chatMessage{{"user", "a"}, {"user", "b"}})
	if aerr == nil || aerr.status != http.StatusBadRequest || !strings.Contains(aerr.Message, "Conversation roles must alternate") {
		t.Errorf("raise_exception: %+v, want a 400 with the template's message", aerr)
	}
	c, err = newChatTemplate(&tokenizer.Config{ChatTemplate: "{{ messages[1].content.upper() }}{{ messages[0].content }}"})
	if err == nil {
		t.Fatal("a template failing on one message loaded")
	}
	c, err = newChatTemplate(&tokenizer.Config{ChatTemplate: "{% if messages|length > 1 %}{{ messages.nothing() }}{% endif %}ok"})
	if err != nil {
		t.Fatal(err)
	}
	if _, aerr = c.render([]chatMessage{{"user", "a"}, {"user", "b"}}); aerr == nil || aerr.status != http.StatusInternalServerError {
		t.Errorf("a failing template: %+v, want a 500", aerr)
	}
}

// TestChatTemplateTimeout checks that a render that runs past its time is
// answered with a 500, and that the template is disabled from then on.
func TestChatTemplateTimeout(t *testing.T) {
	defer func(d time.Duration) { renderTimeout = d }(renderTimeout)
	renderTimeout = 50 * time.Millisecond
	// 10^6 iterations, most of a second for this engine (16 times the
	// limit): no single range is too long.
	src := "{% for m in messages %}{% if m.content == 'slow' %}{% for i in range(100000) %}{% for j in range(10) %}{% endfor %}{% endfor %}{% endif %}{% endfor %}ok"
	c, err := newChatTemplate(&tokenizer.Config{ChatTemplate: src})
	if err != nil {
		t.Fatal(err)
	}
	_, aerr := c.render([]chatMessage{{"user", "slow"}})
	if aerr == nil || aerr.status != http.StatusInternalServerError || !strings.Contains(aerr.Message, "ran past") {
		t.Fatalf("slow render: %+v, want a 500 saying it ran past its time", aerr)
	}
	if _, aerr := c.render([]chatMessage{{"user", "fast"}}); aerr == nil || !strings.Contains(aerr.Message, "disabled") {
		t.Errorf("after a timeout: %+v, want the template disabled", aerr)
	}
}

// newConfigTest starts a ready Server for testConfig's model with the byte
// tokenizer and the tokenizer configuration cfg.
func newConfigTest(t *testing.T, cfg *tokenizer.Config) string {
	t.Helper()
	s := New(Options{Name: "test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := s.ReadyConfig(testModel(t, testConfig()), tokenizer.Byte, cfg); err != nil {
		t.Fatal(err)
	}
	return httptestServer(t, s)
}

// TestSpecialTokens checks that a completion's prompt starts with the
// configuration's Begin, and that generation stops at any of its EOS
// ids: greedy decoding that would go on past the first token stops there,
// with nothing of it in the text, once that token is an EOS.
func TestSpecialTokens(t *testing.T) {
	url := newConfigTest(t, &tokenizer.Config{Begin: []int32{2}, EOS: []int32{3}})
	c := complete(t, url, `{"prompt": "abc", "max_tokens": 4, "temperature": 0}`)
	if c.Usage.PromptTokens != 4 {
		t.Errorf("prompt of 3 bytes after Begin: prompt_tokens %d, want 4", c.Usage.PromptTokens)
	}
	if *c.Choices[0].FinishReason != "length" || len(c.Choices[0].Text) == 0 {
		t.Fatalf("without its first token as an EOS: %+v", c.Choices[0])
	}
	first := int32(c.Choices[0].Text[0]) // a byte model: the token is the byte
	url = newConfigTest(t, &tokenizer.Config{Begin: []int32{2}, EOS: []int32{300, first}})
	c = complete(t, url, `{"prompt": "abc", "max_tokens": 4, "temperature": 0}`)
	if *c.Choices[0].FinishReason != "stop" || c.Choices[0].Text != "" || c.Usage.CompletionTokens != 1 {
		t.Errorf("with its first token %d among the EOS: %+v, %+v; want it to stop there, with no text", first, c.Choices[0], c.Usage)
	}
}

// TestChatWithTemplate checks that /v1/chat/completions renders the
// conversation with the model's template (its prompt is the rendered
// text, without Begin, which a template writes itself), and answers a
// conversation the template refuses with a 400 and its message.
func TestChatWithTemplate(t *testing.T) {
	tmpl := "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}{{ bos_token }}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
	url := newConfigTest(t, &tokenizer.Config{Begin: []int32{2}, ChatTemplate: tmpl, BOSText: "^"})
	code, _, b := call(t, "POST", url+"/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, b)
	}
	rendered := "^<user>hi<assistant>"
	if want := fmt.Sprintf(`"prompt_tokens":%d`, len(rendered)); !strings.Contains(string(b), want) {
		t.Errorf("response %s: want %s, the bytes of %q", b, want, rendered)
	}
	code, _, b = call(t, "POST", url+"/v1/chat/completions", `{"messages": [{"role": "tool", "content": "x"}]}`)
	if code != http.StatusBadRequest || !strings.Contains(string(b), "no tools here") || !strings.Contains(string(b), `"type":"invalid_request_error"`) {
		t.Errorf("a conversation the template refuses: status %d: %s, want 400 with its message", code, b)
	}
}

// TestTokenizeAddSpecial checks that /tokenize with add_special counts
// the Begin a completion's prompt starts with.
func TestTokenizeAddSpecial(t *testing.T) {
	url := newConfigTest(t, &tokenizer.Config{Begin: []int32{2}})
	for _, tc := range []struct{ body, want string }{
		{`{"content": "ab", "add_special": true}`, `{"tokens":[2,97,98]}`},
		{`{"content": "ab"}`, `{"tokens":[97,98]}`},
	} {
		code, _, b := call(t, "POST", url+"/tokenize", tc.body)
		if code != http.StatusOK || strings.TrimSpace(string(b)) != tc.want {
			t.Errorf("%s: %d %s, want %s", tc.body, code, b, tc.want)
		}
	}
}
