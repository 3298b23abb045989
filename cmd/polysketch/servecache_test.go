package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stopServe sends SIGINT and waits for the serve command to return.
func stopServe(t *testing.T, done chan error) error {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return within 30 s of SIGINT")
	}
	return nil
}

// TestServeCacheDir serves a request, stops, and serves it again from a
// new process state with the same --cache-dir: the cache written at
// shutdown is read back, and the first request after the restart hits it.
func TestServeCacheDir(t *testing.T) {
	ckpt, _ := saveTiny(t, "polysketch", 64)
	dir := filepath.Join(t.TempDir(), "cache")
	req := `{"prompt":"` + strings.Repeat("func f() {}\\n", 8) + `","max_tokens":4,"seed":1}`
	post := func(addr string) string {
		resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(req))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return string(b)
	}
	hits := func(addr string) string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return regexp.MustCompile(`(?m)^polysketch_prefix_cache_hits_total \S+`).FindString(string(b))
	}
	addr, _, done := startServe(t, "--checkpoint", ckpt, "--prefill-chunk", "16", "--cache-memory", "64MiB", "--cache-dir", dir)
	post(addr)
	if err := stopServe(t, done); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "prefix-cache.bin")); err != nil {
		t.Fatalf("no cache file after shutdown: %v", err)
	}
	addr, _, done = startServe(t, "--checkpoint", ckpt, "--prefill-chunk", "16", "--cache-memory", "64MiB", "--cache-dir", dir)
	post(addr)
	if got := hits(addr); got != "polysketch_prefix_cache_hits_total 1" {
		t.Errorf("after a restart: %q, want one hit", got)
	}
	if err := stopServe(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestServeCacheFlags checks the errors of bad cache flags: one line each.
func TestServeCacheFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--cache-memory", "-1"}, "cache-memory"},
		{[]string{"serve", "--cache-memory", "lots"}, "want 0 or a size"},
		{[]string{"serve", "--cache-dir", filepath.Join(file, "sub")}, "--cache-dir"},
	} {
		err := run(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v, want one line containing %q", tc.args, err, tc.want)
		}
	}
}

// TestBenchCache runs every part of bench cache at tiny sizes and checks
// its report: a row per history and model, constant polysketch state
// sizes and softmax ones that grow, and both cases of the shared prompt.
func TestBenchCache(t *testing.T) {
	var out bytes.Buffer
	plot := filepath.Join(t.TempDir(), "p.png")
	err := run([]string{"bench", "cache", "--histories", "128,256", "--softmax-histories", "128", "--reps", "1", "--streams", "2",
		"--system", "128", "--max-tokens", "2", "--duration", "300ms", "--rounds", "1", "--plot", plot}, &out)
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, re := range []string{
		`(?m)^polysketch\s+128\s+\S+ \(`, `(?m)^polysketch\s+256\s+\S+ \(`, `(?m)^softmax\s+128\s+\S+ \(`,
		`(?m)^1\s+off\s+\d+`, `(?m)^1\s+1GiB\s+\d+.*×$`,
	} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("no line matching %s in\n%s", re, s)
		}
	}
	bytesOf := func(name string, n int) string {
		m := regexp.MustCompile(`(?m)^` + name + `\s+` + strconv.Itoa(n) + `\s+(\d+)$`).FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("no state size of %s at %d in\n%s", name, n, s)
		}
		return m[1]
	}
	if a, b := bytesOf("polysketch", 64), bytesOf("polysketch", 256); a != b {
		t.Errorf("polysketch states of %s and %s bytes at 64 and 256 tokens, want the same", a, b)
	}
	if a, b := bytesOf("softmax", 64), bytesOf("softmax", 1024); len(a) >= len(b) {
		t.Errorf("softmax states of %s and %s bytes at 64 and 1024 tokens, want growth", a, b)
	}
	if st, err := os.Stat(plot); err != nil || st.Size() == 0 {
		t.Errorf("no plot: %v", err)
	}
}
