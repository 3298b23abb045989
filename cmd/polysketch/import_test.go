package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/hf"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/safetensors"
	"github.com/polysketch/polysketch/train"
)

// fixture is hf's testdata directory of the model name: tiny random
// checkpoints written by transformers with its own logits.
func fixture(name string) string { return filepath.Join("..", "..", "hf", "testdata", name) }

// runOK runs the command line args and returns its output.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(args, &out); err != nil {
		t.Fatalf("polysketch %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}

// readLogits reads the float32 tensor "logits" of a safetensors file.
func readLogits(t *testing.T, path, name string) []float32 {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, _ := f.Lookup(name)
	x := make([]float32, info.Len())
	if err := f.ReadFloat32(name, x); err != nil {
		t.Fatal(err)
	}
	return x
}

func relRMS(got, want []float32) float64 {
	var d, w float64
	for i := range want {
		d += (float64(got[i]) - float64(want[i])) * (float64(got[i]) - float64(want[i]))
		w += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(d / w)
}

// TestImportFixtures imports transformers' fixtures with the command,
// and requires its logits (the logits command, on transformers' own ids
// file) within 1e-4 relative RMS, and its greedy tokens (generate
// --prompt-ids --json at temperature 0).
func TestImportFixtures(t *testing.T) {
	for _, name := range []string{"llama", "qwen2", "gpt2"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ck := filepath.Join(dir, "ck")
			out := runOK(t, "import", fixture(name), "--out", ck)
			if !strings.Contains(out, "written and verified in") {
				t.Errorf("import said:\n%s", out)
			}
			if err := checkpoint.Verify(ck); err != nil {
				t.Error(err)
			}
			logits := filepath.Join(dir, "logits.safetensors")
			runOK(t, "logits", "--checkpoint", ck, "--ids", filepath.Join(fixture(name), "reference.safetensors"), "--out", logits)
			want := readLogits(t, filepath.Join(fixture(name), "reference.safetensors"), "logits")
			if e := relRMS(readLogits(t, logits, "logits"), want); !(e <= 1e-4) {
				t.Errorf("logits differ from transformers' by %.3g relative RMS", e)
			}
			var ref struct {
				Prompt []int32 `json:"prompt_ids"`
				Greedy []int32 `json:"greedy_ids"`
			}
			b, _ := os.ReadFile(filepath.Join(fixture(name), "reference.json"))
			json.Unmarshal(b, &ref)
			var ids []string
			for _, id := range ref.Prompt {
				ids = append(ids, strconv.Itoa(int(id)))
			}
			gen := runOK(t, "generate", "--checkpoint", ck, "--prompt-ids", strings.Join(ids, ","), "--temperature", "0",
				"--tokens", strconv.Itoa(len(ref.Greedy)-len(ref.Prompt)), "--json")
			var got struct {
				Prompt []int32 `json:"prompt_ids"`
				IDs    []int32 `json:"ids"`
			}
			if err := json.Unmarshal([]byte(gen), &got); err != nil {
				t.Fatalf("generate --json printed %q: %v", gen, err)
			}
			if !slices.Equal(got.Prompt, ref.Prompt) || !slices.Equal(got.IDs, ref.Greedy[len(ref.Prompt):]) {
				t.Errorf("greedy ids %v, transformers' %v", got.IDs, ref.Greedy[len(ref.Prompt):])
			}
			if info := runOK(t, "info", ck); !strings.Contains(info, "key/value heads") && name != "gpt2" {
				t.Errorf("info does not describe the grouped heads:\n%s", info)
			}
		})
	}
}

// TestImportRefuses: an existing --out is refused without --force and
// replaced with it; a bad directory writes nothing.
func TestImportRefuses(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	runOK(t, "import", fixture("gpt2"), "--out", ck)
	before, _ := os.ReadFile(filepath.Join(ck, "manifest.json"))
	var out bytes.Buffer
	err := run([]string{"import", fixture("llama"), "--out", ck}, &out)
	if err == nil || !strings.Contains(err.Error(), "exists: choose another directory, or give --force") {
		t.Errorf("import over a checkpoint: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(ck, "manifest.json")); !bytes.Equal(before, after) {
		t.Error("the refused import changed the checkpoint")
	}
	runOK(t, "import", "--force", fixture("llama"), "--out", ck)
	if c, err := train.Open(ck); err != nil || c.Model.Config().KVHeads != 2 {
		t.Errorf("after --force: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, "model.safetensors"), []byte("x"), 0o644)
	err = run([]string{"import", bad, "--out", filepath.Join(dir, "none")}, &out)
	if err == nil || !strings.Contains(err.Error(), "no config.json") {
		t.Errorf("import of a directory without config.json: %v", err)
	}
	if _, serr := os.Stat(filepath.Join(dir, "none")); serr == nil {
		t.Error("a refused import wrote its --out")
	}
	err = run([]string{"import", fixture("gpt2"), "--out", filepath.Join(dir, "g"), "--context", "2048"}, &out)
	if err == nil || !strings.Contains(err.Error(), "--context 2048: GPT-2's learned positions") {
		t.Errorf("import with a context past GPT-2's positions: %v", err)
	}
}

// TestImportTokenizerFiles: the tokenizer's configuration files an import
// keeps are checked as every command that opens the checkpoint checks
// them, so that a file no command would take is refused before anything
// is written, rather than making a checkpoint that nothing opens.
func TestImportTokenizerFiles(t *testing.T) {
	for _, c := range []struct {
		file, content, want string
	}{
		{"tokenizer_config.json", `{"chat_template": 42}`, "chat_template: want a string"},
		{"tokenizer_config.json", `{"eos_token": "<|no such token|>"}`, `eos_token "<|no such token|>" is no token`},
		{"tokenizer_config.json", `{"bos_token": `, "not valid JSON"},
		{"generation_config.json", `{"eos_token_id": 50256}`, "eos_token_id 50256 is outside the vocabulary"},
		// A template serve would refuse: refused here, where it can be
		// fixed, rather than in a checkpoint whose checksums cover it.
		{"tokenizer_config.json", `{"chat_template": "{% for m in messages %}{{ m.content }"}`, "chat_template: "},
		{"chat_template.jinja", `{{ raise_exception("no") }}`, "does not render"},
	} {
		src := hfWithTokenizer(t, "hello world, hello polysketch. ")
		if err := os.WriteFile(filepath.Join(src, c.file), []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "ck")
		var buf bytes.Buffer
		err := run([]string{"import", src, "--out", out}, &buf)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.file) {
			t.Errorf("%s %s: %v, want an error naming the file and containing %q", c.file, c.content, err, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s %s: the refused import wrote --out", c.file, c.content)
		}
	}
}

// TestLogitsOut: logits writes --out as any file, but never over its
// own --ids, nor into the checkpoint it reads.
func TestLogitsOut(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	runOK(t, "import", fixture("llama"), "--out", ck)
	ids := filepath.Join(dir, "ids.safetensors")
	if err := safetensors.WriteRaw(ids, map[string]safetensors.Raw{"input_ids": {DType: "I64", Shape: []int{3}, Data: safetensors.I64([]int64{1, 2, 3})}}, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(ids)
	weights := filepath.Join(ck, "model.safetensors")
	for _, c := range []struct{ out, want string }{
		{ids, "--out " + ids + " is the --ids file"},
		{filepath.Join(dir, ".", "ids.safetensors"), "is the --ids file"},
		{weights, "--out " + weights + " is inside the checkpoint " + ck},
	} {
		var buf bytes.Buffer
		err := run([]string{"logits", "--checkpoint", ck, "--ids", ids, "--out", c.out}, &buf)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("logits --out %s: %v, want an error containing %q", c.out, err, c.want)
		}
	}
	if after, _ := os.ReadFile(ids); !bytes.Equal(before, after) {
		t.Error("logits overwrote its --ids")
	}
	if _, err := train.Open(ck); err != nil {
		t.Errorf("logits wrote into the checkpoint: %v", err)
	}
	runOK(t, "logits", "--checkpoint", ck, "--ids", ids, "--out", filepath.Join(dir, "logits.safetensors"))
}

// TestServeBadTemplate: a chat template that does not compile stops serve
// in one line naming the checkpoint it came with, "serve:" said once.
func TestServeBadTemplate(t *testing.T) {
	// As a checkpoint written before import checked templates.
	_, m := saveTiny(t, "softmax", 16)
	ck := filepath.Join(t.TempDir(), "ck")
	if err := checkpoint.Save(ck, &checkpoint.Checkpoint{Model: m, State: checkpoint.State{Tokenizer: "byte"},
		Files: map[string][]byte{"tokenizer_config.json": []byte(`{"chat_template": "{{ messages"}`)}}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run([]string{"serve", "--checkpoint", ck, "--addr", "127.0.0.1:0"}, &out)
	if err == nil || !strings.HasPrefix(err.Error(), "serve: checkpoint "+ck+": chat_template: ") || strings.Count(err.Error(), "serve:") != 1 {
		t.Errorf("serve with a template that does not compile: %v", err)
	}
}

// TestImportInterrupted: Ctrl-C while the checkpoint is written stops
// the import, leaves the checkpoint --force was replacing as it was, and
// leaves nothing of the new one (a hidden temporary directory as large
// as the weights, before).
func TestImportInterrupted(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	runOK(t, "import", fixture("gpt2"), "--out", ck)
	before, _ := os.ReadFile(filepath.Join(ck, "manifest.json"))
	savingHook = func(ctx context.Context) {
		syscall.Kill(os.Getpid(), syscall.SIGINT)
		<-ctx.Done()
	}
	defer func() { savingHook = nil }()
	var out bytes.Buffer
	err := run([]string{"import", "--force", fixture("llama"), "--out", ck}, &out)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("import interrupted: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(ck, "manifest.json")); !bytes.Equal(before, after) {
		t.Error("the interrupted import changed the checkpoint it was replacing")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("the interrupted import left %q", left)
	}
	if _, err := train.Open(ck); err != nil {
		t.Error(err)
	}

	// The same of export, over a model it exported before.
	exported := filepath.Join(dir, "hf")
	savingHook = nil
	ck = filepath.Join(dir, "llama")
	runOK(t, "import", fixture("llama"), "--out", ck)
	runOK(t, "export", "--checkpoint", ck, "--out", exported)
	before, _ = os.ReadFile(filepath.Join(exported, "config.json"))
	savingHook = func(ctx context.Context) {
		syscall.Kill(os.Getpid(), syscall.SIGINT)
		<-ctx.Done()
	}
	err = run([]string{"export", "--force", "--checkpoint", ck, "--out", exported}, &out)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("export interrupted: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(exported, "config.json")); !bytes.Equal(before, after) {
		t.Error("the interrupted export changed the model it was replacing")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("the interrupted export left %q", left)
	}
}

// trainLlama trains a small model of the Llama layout (softmax attention,
// grouped heads) for a few steps and returns its run directory.
func trainLlama(t *testing.T) string {
	t.Helper()
	m, err := model.New(model.Config{
		Vocab: 256, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Context: 32, Hidden: 48,
		Attention: attention.SoftmaxConfig{}, Positions: model.PositionsRoPEOnly, Norm: model.NormRMS,
		FFN: model.FFNSwiGLU, NoHeadBias: true, EmbedScale: 1, RoPETheta: 100000, Seed: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	text := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 200)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte(text), 0o644)
	corpus, err := data.NewCorpus(filepath.Join(dir, "a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tr, val, err := data.Load(context.Background(), corpus, tokenizer.Byte, data.Options{CacheDir: filepath.Join(dir, "cache"), ValFraction: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	defer val.Close()
	tc := train.DefaultConfig()
	tc.Batch, tc.Steps, tc.Warmup, tc.EvalEvery, tc.EvalBatches = 2, 3, 1, 0, 1
	tc.Tokenizer = "byte"
	runDir := filepath.Join(dir, "run")
	trainer, err := train.Start(context.Background(), runDir, train.Run{Model: m.Config(), Recipe: tc, Source: &train.Corpus{Train: tr, Val: val}, Init: train.Weights(m)})
	if err != nil {
		t.Fatal(err)
	}
	defer trainer.Close()
	if _, err := trainer.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	return runDir
}

// TestExportRoundTrip: a softmax model trained here, exported in the
// Llama layout and imported again, gives the same logits bit for bit.
func TestExportRoundTrip(t *testing.T) {
	runDir := trainLlama(t)
	dir := t.TempDir()
	exported, back := filepath.Join(dir, "hf"), filepath.Join(dir, "back")
	runOK(t, "export", "--checkpoint", runDir, "--out", exported)
	for _, f := range []string{"config.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(exported, f)); err != nil {
			t.Errorf("the export lacks %s", f)
		}
	}
	runOK(t, "import", exported, "--out", back, "--attention", "softmax")
	ids := filepath.Join(dir, "ids.safetensors")
	rng := rand.New(rand.NewPCG(1, 1))
	x := make([]int64, 2*20)
	for i := range x {
		x[i] = int64(rng.IntN(256))
	}
	if err := safetensors.WriteRaw(ids, map[string]safetensors.Raw{"input_ids": {DType: "I64", Shape: []int{2, 20}, Data: safetensors.I64(x)}}, nil); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	runOK(t, "logits", "--checkpoint", runDir, "--ids", ids, "--out", a)
	runOK(t, "logits", "--checkpoint", back, "--ids", ids, "--out", b)
	if la, lb := readLogits(t, a, "logits"), readLogits(t, b, "logits"); !slices.Equal(la, lb) {
		t.Errorf("logits after export and import differ by %.3g relative RMS; want the same bits", relRMS(lb, la))
	}
	var out bytes.Buffer
	if err := run([]string{"export", "--checkpoint", runDir, "--out", exported}, &out); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("export over a directory: %v", err)
	}
	// --force replaces an exported model, never the checkpoint or run
	// it reads, nor any other directory.
	runOK(t, "export", "--checkpoint", runDir, "--out", exported, "--force")
	for _, dst := range []string{runDir, train.CheckpointIn(runDir), filepath.Dir(runDir)} {
		err := run([]string{"export", "--checkpoint", runDir, "--out", dst, "--force"}, &out)
		if err == nil || !strings.Contains(err.Error(), "no Hugging Face model") {
			t.Errorf("export --force over %s: %v", dst, err)
		}
		if _, err := train.Open(runDir); err != nil {
			t.Fatalf("after export --force over %s: %v", dst, err)
		}
	}
	def, _ := saveTiny(t, "softmax", 16)
	err := run([]string{"export", "--checkpoint", def, "--out", filepath.Join(dir, "x")}, &out)
	if err == nil || !strings.HasPrefix(err.Error(), "export: checkpoint "+def+" cannot be written in the Llama layout: norm ") || !strings.Contains(err.Error(), "the Llama layout has rmsnorm") {
		t.Errorf("export of the default architecture: %v, want one naming the checkpoint", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".x*")); len(left) > 0 {
		t.Errorf("the refused export left %q", left)
	}
}

// hfWithTokenizer writes a Hugging Face directory of a random model of the
// Llama layout whose tokenizer.json is a byte-level BPE fitted to text.
func hfWithTokenizer(t *testing.T, text string) string {
	t.Helper()
	counts := tokenizer.NewCounts(tokenizer.DefaultSpecial)
	counts.Add([]byte(text))
	tok, err := tokenizer.Train(counts, tokenizer.TrainOptions{VocabSize: 300, Special: tokenizer.DefaultSpecial})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(model.Config{
		Vocab: tok.VocabSize(), Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Context: 128, Hidden: 48,
		Attention: attention.FlashConfig{Block: 64}, Positions: model.PositionsRoPEOnly, Norm: model.NormRMS,
		FFN: model.FFNSwiGLU, NoHeadBias: true, EmbedScale: 1, QKVBias: true, OutBias: true, Tied: true, Seed: 9,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "hf")
	files := map[string][]byte{"tokenizer.json": tok.JSON(), "tokenizer_config.json": tokenizer.ConfigJSON(tok), "generation_config.json": fmt.Appendf(nil, `{"eos_token_id": %d}`, tok.VocabSize()-1)}
	if err := hf.Write(dir, m, files); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestServeImported: an imported model with a tokenizer generates, is
// evaluated, and is served: greedy completions as generate makes them,
// and a follow-up resumes from the prefix cache.
func TestServeImported(t *testing.T) {
	text := strings.Repeat("package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n", 40)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	out := runOK(t, "import", hfWithTokenizer(t, text), "--out", ck)
	if !strings.Contains(out, "kept: generation_config.json, tokenizer_config.json") {
		t.Errorf("import said:\n%s", out)
	}
	os.WriteFile(filepath.Join(dir, "corpus.txt"), []byte(text), 0o644)
	if ev := runOK(t, "eval", "--checkpoint", ck, "--corpus", filepath.Join(dir, "corpus.txt"), "--cache-dir", filepath.Join(dir, "cache")); !strings.Contains(ev, "perplexity") {
		t.Errorf("eval said:\n%s", ev)
	}
	prompt := text[:60]
	gen := runOK(t, "generate", "--checkpoint", ck, "--prompt", prompt, "--temperature", "0", "--tokens", "8", "--echo=false")
	want := lossy(strings.TrimSuffix(gen, "\n"))

	var log syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"serve", "--checkpoint", ck, "--addr", "127.0.0.1:0", "--prefill-chunk", "4"}, &log)
	}()
	addrRE := regexp.MustCompile(`listening on http://(\S+)`)
	var addr string
	for start := time.Now(); addr == ""; time.Sleep(10 * time.Millisecond) {
		if m := addrRE.FindStringSubmatch(log.String()); m != nil && strings.Contains(log.String(), "ready:") {
			addr = m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("serve returned: %v\n%s", err, log.String())
		default:
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("serve not ready:\n%s", log.String())
		}
	}
	complete := func(prompt string) (string, int) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 8, "temperature": 0})
		resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("completion: %v %+v", err, c)
		}
		return c.Choices[0].Text, c.Usage.Details.Cached
	}
	if got, _ := complete(prompt); got != want {
		t.Errorf("served greedy completion %q, generate's %q", got, want)
	}
	if _, cached := complete(text[:90]); cached == 0 {
		t.Error("the follow-up did not resume from the prefix cache")
	}
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// lossy replaces every byte of s that is not part of valid UTF-8 by
// U+FFFD, as the server's JSON does.
func lossy(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r) // range yields U+FFFD for each invalid byte
	}
	return b.String()
}

// TestBenchImported: bench decode, bench train and bench serve take an
// imported checkpoint, or a named shape, as --shape.
func TestBenchImported(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	runOK(t, "import", fixture("llama"), "--out", ck)
	out := runOK(t, "bench", "decode", "--shape", ck, "--tokens", "2", "--rounds", "1", "--prefill", "8", "--copy-mib", "1", "--streams", "1,3")
	for _, want := range []string{"key/value heads", "MB read per token", "GB/s", "% of the bound", "3 streams", "prefill"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench decode lacks %q:\n%s", want, out)
		}
	}
	out = runOK(t, "bench", "train", "--shape", ck, "--n", "16", "--tokens", "32", "--steps", "1", "--json")
	if !strings.Contains(out, `"mechanism":"flash:block=64"`) || !strings.Contains(out, `"tokens_per_sec":`) {
		t.Errorf("bench train --shape: %s", out)
	}
	var buf bytes.Buffer
	if err := run([]string{"bench", "train", "--shape", "smollm2-135m", "--layers", "2"}, &buf); err == nil || !strings.Contains(err.Error(), "--shape and --layers") {
		t.Errorf("bench train --shape --layers: %v", err)
	}
	out = runOK(t, "bench", "serve", "--shape", ck, "--clients", "1", "--requests", "1", "--max-tokens", "2", "--json")
	if !strings.Contains(out, `"errors":0`) {
		t.Errorf("bench serve --shape: %s", out)
	}
}

// TestTrainFrom: train --from fine-tunes an imported model; the run
// resumes and its checkpoint keeps the model's files.
func TestTrainFrom(t *testing.T) {
	text := strings.Repeat("package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n", 40)
	dir := t.TempDir()
	ck, runDir := filepath.Join(dir, "ck"), filepath.Join(dir, "run")
	runOK(t, "import", hfWithTokenizer(t, text), "--out", ck)
	os.WriteFile(filepath.Join(dir, "corpus.txt"), []byte(text), 0o644)
	common := []string{"--corpus", filepath.Join(dir, "corpus.txt"), "--cache-dir", filepath.Join(dir, "cache"), "--out", runDir, "--batch", "2", "--context", "16", "--eval-batches", "1"}
	out := runOK(t, append([]string{"train", "--from", ck, "--steps", "2"}, common...)...)
	if !strings.Contains(out, "step 2 of 2") {
		t.Errorf("train --from said:\n%s", out)
	}
	out = runOK(t, append([]string{"train", "--resume", "--steps", "3"}, common...)...)
	if !strings.Contains(out, "step 3 of 3") {
		t.Errorf("train --resume said:\n%s", out)
	}
	s, err := train.Open(runDir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Model.Config().KVHeads != 2 || s.Files["generation_config.json"] == nil || s.Model.Config().Context != 16 {
		t.Errorf("the fine-tuned run's model %+v, files %v", s.Model.Config(), len(s.Files))
	}
	var buf bytes.Buffer
	err = run([]string{"train", "--from", ck, "--layers", "3", "--out", filepath.Join(dir, "x")}, &buf)
	if err == nil || !strings.Contains(err.Error(), "--from and --layers") {
		t.Errorf("train --from --layers: %v", err)
	}

	// Learned positions (GPT-2's) are a table of the model's context: a
	// run from it trains at that length, and another --context is
	// refused rather than dropped.
	m, err := model.New(model.Config{Vocab: 256, Dim: 16, Layers: 1, Heads: 2, Context: 32, Attention: attention.FlashConfig{Block: 16},
		Positions: model.PositionsLearned, Norm: model.NormLayer, FFN: model.FFNGELU, EmbedScale: 1, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	learned := filepath.Join(dir, "learned")
	if err := checkpoint.Save(learned, &checkpoint.Checkpoint{Model: m, State: checkpoint.State{Tokenizer: "byte"}}); err != nil {
		t.Fatal(err)
	}
	args := []string{"train", "--from", learned, "--corpus", filepath.Join(dir, "corpus.txt"), "--cache-dir", filepath.Join(dir, "cache"), "--batch", "2", "--eval-batches", "1", "--steps", "1"}
	for _, n := range []string{"16", "64"} {
		out := filepath.Join(dir, "learned-"+n)
		err = run(append(args, "--out", out, "--context", n), &buf)
		if err == nil || !strings.Contains(err.Error(), "--context "+n+": "+learned+"'s positions are a learned table of 32") {
			t.Errorf("train --from a model of learned positions --context %s: %v", n, err)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("the refused run wrote %s", out)
		}
	}
	runOK(t, append(args, "--out", filepath.Join(dir, "learned-run"))...)
	if s, err := train.Open(filepath.Join(dir, "learned-run")); err != nil || s.Model.Config().Context != 32 {
		t.Errorf("train --from a model of learned positions: %v", err)
	}
}
