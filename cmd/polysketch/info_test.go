package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/train"
)

func TestInfo(t *testing.T) {
	dir, args := tinyRun(t)
	runDir := filepath.Join(dir, "run")
	if _, errOut, err := runQuiet(t, append(append([]string{"train"}, args...), "--schedule", "cosine")...); err != nil {
		t.Fatalf("train: %v\n%s", err, errOut)
	}
	ms := metricsOf(t, runDir)
	last := ms[len(ms)-1]

	for _, d := range []string{runDir, filepath.Join(runDir, train.CheckpointDir)} {
		out, _, err := runQuiet(t, "info", d)
		if err != nil {
			t.Fatalf("info %s: %v", d, err)
		}
		// tinyRun's model: 1 layer of dim 16, 2 heads, context 16 and the
		// byte vocabulary: embedding and output 2·256·16 = 8192, attention
		// 4·16² = 1024 plus polysketch's learned sketches, the GLU and
		// norms; the exact count comes from the model.
		c, err := checkpoint.Load(filepath.Join(runDir, train.CheckpointDir))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range c.Model.Params() {
			n += p.Value.Len()
		}
		for _, want := range []string{
			"checkpoint     " + filepath.Join(runDir, train.CheckpointDir) + "\n",
			"model          decoder, 1 layer, dim 16, 2 heads of 8, hidden 64, context 16, vocabulary 256\n",
			fmt.Sprintf("parameters     %s (%d)\n", count(n), n),
			"attention      polysketch attention (sketch-size=4, block=8, learned=true)\n",
			"tokenizer      byte\n",
			"precision      fp32\n",
			"step           10 of 10\n",
			fmt.Sprintf("tokens seen    %d\n", 10*4*16),
			fmt.Sprintf("last losses    training %.4f (step 10), validation %.4f (step 10)\n", last.Loss, *last.ValLoss),
			"lr 0.003 → 0.0003 (cosine, warm-up 1)",
			"verified       yes",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("info %s lacks %q:\n%s", d, want, out)
			}
		}
	}

	// A run trained in bf16 says so: its recipe records the precision.
	bf16 := filepath.Join(dir, "bf16")
	if _, errOut, err := runQuiet(t, append(append([]string{"train"}, args...), "--out", bf16, "--steps", "2", "--precision", "bf16")...); err != nil {
		t.Fatalf("train --precision bf16: %v\n%s", err, errOut)
	}
	if out, _, err := runQuiet(t, "info", bf16); err != nil || !strings.Contains(out, "precision      bf16\n") || !strings.Contains(out, "step           2 of 2\n") {
		t.Errorf("info of a 2-step bf16 run: %v\n%s", err, out)
	}

	// A corrupted weight file: described, but the verification fails,
	// and so does info.
	w := filepath.Join(runDir, train.CheckpointDir, "model.safetensors")
	b, err := os.ReadFile(w)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	if err := os.WriteFile(w, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runQuiet(t, "info", runDir)
	if err == nil || !strings.Contains(err.Error(), "changed after saving") || exitCode(err) != 1 {
		t.Errorf("info of a corrupted checkpoint: error %v (exit %d), want a file changed after saving, exit 1", err, exitCode(err))
	}
	if !strings.Contains(out, "step           10 of 10") || !strings.Contains(out, "verified       NO: ") ||
		!strings.Contains(out, "by its configuration, besides the attention's own\n") {
		t.Errorf("info of a corrupted checkpoint printed:\n%s", out)
	}

	// A damaged configuration that describes a model far too large to
	// build is described from the configuration alone, never built.
	cf := filepath.Join(runDir, train.CheckpointDir, "config.json")
	cb, err := os.ReadFile(cf)
	if err != nil {
		t.Fatal(err)
	}
	cb = []byte(strings.Replace(string(cb), `"dim": 16,`, `"dim": 2000000000,`, 1))
	if err := os.WriteFile(cf, cb, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = runQuiet(t, "info", runDir)
	if err == nil || !strings.Contains(out, "dim 2000000000") || !strings.Contains(out, "parameters     more than 9.2e18 by its configuration") {
		t.Errorf("info of a configuration of dim 2e9: error %v, printed:\n%s", err, out)
	}

	broken := filepath.Join(dir, "broken")
	files := map[string]string{"manifest.json": "{}", "config.json": "{not JSON", "state.json": "{}"}
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(broken, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"info", dir}, "holds no checkpoint (no manifest.json)", 1},
		{[]string{"info", broken}, filepath.Join(broken, "config.json") + ": invalid character", 1},
		{[]string{"info", filepath.Join(dir, "nonexistent")}, "holds no checkpoint", 1},
		{[]string{"info"}, "name a checkpoint directory", 2},
		{[]string{"info", "--bogus", runDir}, "flag provided but not defined: -bogus", 2},
	} {
		out, _, err := runQuiet(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") || exitCode(err) != tc.code || out != "" {
			t.Errorf("%q: printed %q, error %v (exit %d); want one line with %q, exit %d", tc.args, out, err, exitCode(err), tc.want, tc.code)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, "polysketch (devel) " + runtime.Version()},
		{"built from a tree", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "557db68aa"}, {Key: "vcs.time", Value: "2026-11-24T22:00:00Z"}, {Key: "vcs.modified", Value: "true"},
		}}, true, "polysketch (devel) (git 557db68aa, 2026-11-24T22:00:00Z, with uncommitted changes) go1.26.8"},
		{"installed at a version", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.3.1"}}, true, "polysketch v0.3.1 go1.26.0"},
	} {
		want := tc.want + " " + runtime.GOOS + "/" + runtime.GOARCH
		if got := version(tc.info, tc.ok); got != want {
			t.Errorf("%s: %q, want %q", tc.name, got, want)
		}
	}
	for _, arg := range []string{"--version", "-version", "version"} {
		out, _, err := runQuiet(t, arg)
		if err != nil || !regexp.MustCompile(`^polysketch \S+.* go1\.\S+ \S+/\S+\n$`).MatchString(out) {
			t.Errorf("%s: %q, %v", arg, out, err)
		}
	}
}

// TestExitCodes checks that usage errors exit with status 2, as the flag
// package's do, and other failures with 1.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"nonsense"}, 2},
		{[]string{"bench", "nonsense"}, 2},
		{[]string{"train", "--nonsense"}, 2},
		{[]string{"train", "--steps", "many"}, 2},
		{[]string{"train", "stray"}, 2},
		{[]string{"eval", "--batch", "x"}, 2},
		{[]string{"generate", "--bogus"}, 2},
		{[]string{"eval", "--checkpoint", t.TempDir()}, 1},
	} {
		_, _, err := runQuiet(t, tc.args...)
		if err == nil || errors.Is(err, flag.ErrHelp) || exitCode(err) != tc.code {
			t.Errorf("%q: error %v, exit %d; want exit %d", tc.args, err, exitCode(err), tc.code)
		}
	}
}

// TestTrainHelpDefaults checks that train -h gives the attention defaults
// train uses (block 64, learned sketches), not those of the mechanism
// alone, which other commands' help keeps.
func TestTrainHelpDefaults(t *testing.T) {
	out, _, err := runQuiet(t, "train", "-h")
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("train -h: %v", err)
	}
	for _, want := range []string{"polysketch default 64;", "(polysketch default true)", "--block=64 ", "--learned=true ", "(polysketch's own default: false)"} {
		if !strings.Contains(out, want) {
			t.Errorf("train -h lacks %q", want)
		}
	}
	for _, bad := range []string{"; polysketch default 256;", "with the model (polysketch default false)", "--learned=false"} {
		if strings.Contains(out, bad) {
			t.Errorf("train -h says %q", bad)
		}
	}
	out, _, _ = runQuiet(t, "mechanisms")
	if !strings.Contains(out, "--learned=false") || strings.Contains(out, "own default") {
		t.Errorf("mechanisms lists other defaults than the mechanisms' own:\n%s", out)
	}
}
