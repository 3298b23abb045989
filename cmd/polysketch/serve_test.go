package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"runtime"
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

// TestServeSignalWhileLoading sends SIGTERM while the model loads (held
// by a test hook, as a slow disk would hold it): serve must stop at once,
// with an error, rather than wait for the load.
func TestServeSignalWhileLoading(t *testing.T) {
	dir, _ := saveTiny(t, "polysketch", 64)
	loading, release := make(chan struct{}), make(chan struct{})
	testHookLoading = func() {
		close(loading)
		<-release
	}
	defer close(release)
	defer func() { testHookLoading = nil }()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- run([]string{"serve", "--checkpoint", dir, "--addr", "127.0.0.1:0"}, &out) }()
	select {
	case <-loading:
	case err := <-done:
		t.Fatalf("serve returned before loading: %v", err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "interrupted while loading") {
			t.Errorf("serve after SIGTERM while loading: %v, want an error saying so", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("serve has not returned a minute after SIGTERM: the load holds it")
	}
}

// TestServeCacheDirNotWritable checks that a --cache-dir that cannot be
// written is refused at start, before the model loads, rather than at
// shutdown when the cache is written.
func TestServeCacheDirNotWritable(t *testing.T) {
	ro := t.TempDir()
	os.Chmod(ro, 0o555)
	t.Cleanup(func() { os.Chmod(ro, 0o755) })
	if f, err := os.CreateTemp(ro, "probe"); err == nil {
		// Root writes anywhere the file system allows.
		f.Close()
		os.Remove(f.Name())
		if ro = "/proc/self"; runtime.GOOS != "linux" {
			t.Skip("no directory that this user cannot write")
		}
	}
	dir, _ := saveTiny(t, "polysketch", 64)
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"serve", "--checkpoint", dir, "--addr", "127.0.0.1:0", "--cache-dir", ro}, &out)
	}()
	for {
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "--cache-dir") || !strings.Contains(err.Error(), "not writable") {
				t.Errorf("serve --cache-dir %s: %v, want an error naming --cache-dir", ro, err)
			}
			if strings.Contains(out.String(), "listening") {
				t.Errorf("serve started before refusing --cache-dir:\n%s", out.String())
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
		if strings.Contains(out.String(), "ready:") {
			// It serves, and would fail only at shutdown.
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
			err := <-done
			t.Fatalf("serve --cache-dir %s started serving; at shutdown: %v", ro, err)
		}
	}
}
