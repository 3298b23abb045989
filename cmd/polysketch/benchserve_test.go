package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchServeJSON(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"bench", "serve", "--clients", "1,2", "--requests", "4", "--max-tokens", "3", "--duration", "30s", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want one per case:\n%s", len(lines), out.String())
	}
	for i, line := range lines {
		var r benchServeRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if r.Clients != []int{1, 2}[i] || r.Requests != 4 || r.Errors != 0 || r.TokensPerS <= 0 || r.TTFTp50 <= 0 || r.ITLp50 <= 0 {
			t.Errorf("line %q: want %d clients, 4 requests of 3 tokens, no errors and timings", line, []int{1, 2}[i])
		}
		// 4 requests of 3 tokens: tokens/s over requests/s is 3.
		if got := r.TokensPerS / r.RequestsPerS; got < 2.99 || got > 3.01 {
			t.Errorf("line %q: %v tokens per request, want 3", line, got)
		}
	}
}

func TestServeBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--max-sequences", "0"}, "--max-sequences 0: must be at least 1"},
		{[]string{"serve", "--addr", "8080"}, `--addr "8080": want host:port`},
		{[]string{"serve", "--kv-memory", "-1"}, "--kv-memory -1"},
		{[]string{"serve", "--shutdown-timeout", "-1s"}, "--shutdown-timeout -1s"},
		{[]string{"serve", "--checkpoint", "/nonexistent/polysketch", "--addr", "127.0.0.1:0"}, "serve:"},
		{[]string{"serve", "stray"}, "unexpected argument"},
		{[]string{"bench", "serve", "--clients", "0"}, "--clients"},
		{[]string{"bench", "serve", "--max-tokens", "0"}, "--max-tokens 0"},
		{[]string{"bench", "serve", "--url", "http://127.0.0.1:1", "--requests", "1", "--clients", "1"}, "every request failed"},
	} {
		err := run(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v, want one line containing %q", tc.args, err, tc.want)
		}
	}
}
