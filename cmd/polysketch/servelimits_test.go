package main

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startServe runs the serve command with args and returns its address,
// its output and the channel of its result, once it is ready.
func startServe(t *testing.T, args ...string) (string, *syncBuffer, chan error) {
	t.Helper()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), &out) }()
	addrRE := regexp.MustCompile(`listening on http://(\S+)`)
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		s := out.String()
		if m := addrRE.FindStringSubmatch(s); m != nil && strings.Contains(s, "ready:") {
			return m[1], &out, done
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
}

// TestServeShutdownCuts: requests still running at --shutdown-timeout are
// told so before their connections close: a stream gets an error event, a
// waiting client a 503 with an error object; the command says how many
// were cut and fails (exits non-zero).
func TestServeShutdownCuts(t *testing.T) {
	dir, _ := saveTiny(t, "polysketch", 64)
	addr, _, done := startServe(t, "--checkpoint", dir, "--shutdown-timeout", "200ms", "--max-length", "1000000")
	const body = `"prompt":"a","max_tokens":900000`
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"stream":true,`+body+`}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		t.Fatal("no first event")
	}
	type answer struct {
		code int
		body []byte
		err  error
	}
	whole := make(chan answer, 1)
	go func() {
		r, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{`+body+`}`))
		if err != nil {
			whole <- answer{err: err}
			return
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		whole <- answer{r.StatusCode, b, err}
	}()
	// Both decode before the signal.
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		r, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if strings.Contains(string(b), "polysketch_active_sequences 2") {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("the two requests did not start decoding in 30 s")
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var last string
	done1 := false
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = data
			done1 = done1 || data == "[DONE]"
		}
	}
	var e struct {
		Error struct{ Message, Type string }
	}
	if done1 || json.Unmarshal([]byte(last), &e) != nil || !strings.Contains(e.Error.Message, "shutting down") || e.Error.Type != "server_error" {
		t.Errorf("stream cut at shutdown: last event %.300q ([DONE] %v), want an error event saying the server is shutting down", last, done1)
	}
	a := <-whole
	e.Error.Message = ""
	if a.err != nil || a.code != http.StatusServiceUnavailable || json.Unmarshal(a.body, &e) != nil || !strings.Contains(e.Error.Message, "shutting down") {
		t.Errorf("waiting client cut at shutdown: %d %.300s %v, want 503 with an error object", a.code, a.body, a.err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "2 requests") {
			t.Errorf("serve after a shutdown that cut 2 requests: %v, want an error counting them", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return within 30 s of SIGINT")
	}
}

// TestServeHeaderTimeout: a read timeout of 0 (none) keeps a header
// timeout, so that a client sending its headers slowly cannot hold a
// connection.
func TestServeHeaderTimeout(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct{ read, header time.Duration }{
		{0, 10 * time.Second}, {2 * time.Second, 2 * time.Second}, {time.Minute, 10 * time.Second},
	} {
		hs := httpServer(http.NotFoundHandler(), tc.read, time.Minute, log)
		if hs.ReadHeaderTimeout != tc.header || hs.ReadTimeout != tc.read {
			t.Errorf("--read-timeout %s: header timeout %s, read timeout %s; want %s and %s", tc.read, hs.ReadHeaderTimeout, hs.ReadTimeout, tc.header, tc.read)
		}
	}
}

// TestServeFlags: a --max-queue below the sequences one request may ask
// for is refused at start-up, before anything is loaded.
func TestServeFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-queue", "8"}, "--max-queue 8: must be at least 16"},
		{[]string{"--max-queue", "15"}, "--max-queue 15: must be at least 16"},
	} {
		err := run(append([]string{"serve", "--addr", "127.0.0.1:0", "--checkpoint", missing}, tc.args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("serve %v: %v, want one line containing %q", tc.args, err, tc.want)
		}
	}
}
