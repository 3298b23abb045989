package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader on other
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeGracefulShutdown runs the serve command, starts a streaming
// request, and sends SIGINT: the request in flight must finish whole, the
// command return without error (exit 0), and new connections be refused.
func TestServeGracefulShutdown(t *testing.T) {
	dir, _ := saveTiny(t, "polysketch", 64)
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- run([]string{"serve", "--checkpoint", dir, "--addr", "127.0.0.1:0"}, &out) }()
	addrRE := regexp.MustCompile(`listening on http://(\S+)`)
	var addr string
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		s := out.String()
		if m := addrRE.FindStringSubmatch(s); m != nil && strings.Contains(s, "ready:") {
			addr = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve returned early: %v\n%s", err, s)
		default:
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("serve not ready after 30 s:\n%s", s)
		}
	}
	const tokens = 2000
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"a","max_tokens":2000,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatal("no first event")
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var usage struct {
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	finished := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			finished = true
			break
		}
		if err := json.Unmarshal([]byte(data), &usage); err != nil {
			t.Fatal(err)
		}
	}
	if !finished || usage.Usage == nil || usage.Usage.CompletionTokens != tokens {
		t.Errorf("the request in flight did not finish whole: [DONE] %v, usage %+v", finished, usage.Usage)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after SIGINT: %v, want nil (exit 0)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return within 30 s of SIGINT")
	}
	if !strings.Contains(out.String(), "stopped") {
		t.Errorf("output lacks the stop line:\n%s", out.String())
	}
	if _, err := http.Get("http://" + addr + "/health"); err == nil {
		t.Error("the server still accepts connections after shutdown")
	}
}
