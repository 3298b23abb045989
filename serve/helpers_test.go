package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
)

// testConfig is a small byte-level polysketch model: fast enough for
// many requests, large enough (products of 64 columns and more) that a
// step's rows share matrix products.
func testConfig() model.Config {
	return model.Config{
		Vocab: 256, Dim: 64, Layers: 2, Heads: 2, Context: 64, Hidden: 288, // the GLU output sums over more than one block of the packed products
		Attention: attention.PolysketchConfig{Degree: 4, SketchSize: 8, Block: 16, Local: true, Learned: true, Sketch: attention.Gaussian},
		Seed:      7,
	}
}

func testModel(t testing.TB, c model.Config) *model.Model {
	t.Helper()
	m, err := model.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// byteIDs returns the tokens of s under the byte tokenizer.
func byteIDs(s string) []int32 {
	ids := make([]int32, len(s))
	for i := range len(s) {
		ids[i] = int32(s[i])
	}
	return ids
}

// newTest starts a ready Server for model m (testConfig's when nil) on
// an httptest server, closed at the end of the test.
func newTest(t testing.TB, o Options, m *model.Model) (*Server, *httptest.Server) {
	t.Helper()
	return newTestWith(t, o, m, tokenizer.Byte)
}

// newTestWith is newTest with the tokenizer tok.
func newTestWith(t testing.TB, o Options, m *model.Model, tok tokenizer.Tokenizer) (*Server, *httptest.Server) {
	t.Helper()
	if m == nil {
		m = testModel(t, testConfig())
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Name == "" {
		o.Name = "test"
	}
	s := New(o)
	if err := s.Ready(m, tok); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return s, ts
}

// call sends a request and returns the status and the body.
func call(t testing.TB, method, url, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// complete posts a completion request that must succeed and returns the
// decoded response.
func complete(t testing.TB, url, body string) completion {
	t.Helper()
	code, _, b := call(t, "POST", url+"/v1/completions", body)
	if code != http.StatusOK {
		t.Fatalf("POST %s: status %d: %s", body, code, b)
	}
	var c completion
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("response %s: %v", b, err)
	}
	return c
}

// events reads a server-sent event stream to its end and returns the
// data of every event, checking the framing: "data: " lines each followed
// by a blank line, ending with [DONE].
func events(t testing.TB, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream line %q: want data: …", line)
		}
		if !sc.Scan() || sc.Text() != "" {
			t.Fatalf("stream: event %q not followed by a blank line", data)
		}
		out = append(out, data)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 || out[len(out)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", out)
	}
	return out[:len(out)-1]
}

// streamed posts a streaming completion request and returns its chunks.
func streamed(t testing.TB, url, path, body string) []completion {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: status %d: %s", body, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	var chunks []completion
	for _, e := range events(t, resp.Body) {
		var c completion
		d := json.NewDecoder(bytes.NewReader([]byte(e)))
		if err := d.Decode(&c); err != nil {
			t.Fatalf("event %s: %v", e, err)
		}
		chunks = append(chunks, c)
	}
	return chunks
}

// joined returns the text of each choice of a stream, and its finish
// reason.
func joined(chunks []completion) (map[int]string, map[int]string) {
	text, finish := map[int]string{}, map[int]string{}
	for _, c := range chunks {
		for _, ch := range c.Choices {
			text[ch.Index] += ch.Text
			if ch.FinishReason != nil {
				finish[ch.Index] = *ch.FinishReason
			}
		}
	}
	return text, finish
}

// httptestServer serves s (ready or not) and returns its URL.
func httptestServer(t testing.TB, s *Server) string {
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return ts.URL
}
