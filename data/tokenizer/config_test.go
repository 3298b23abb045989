package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeFiles writes files (name → content) into a new directory.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestReadConfig checks the Begin, EOS and template that the files of
// Llama 2, Llama 3.2 and Qwen2.5 give (their special-token fields as
// published, on piece.json's vocabulary, where <s> is 1 and </s> 2, and on
// the GPT-2 tokenizer, whose <|endoftext|> is 50256), and what a
// tokenizer alone gives.
func TestReadConfig(t *testing.T) {
	piece, err := Parse(pieceJSON(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	gpt2 := mustGPT2(t)
	for _, tc := range []struct {
		name     string
		tok      Tokenizer
		files    map[string]string
		begin    []int32
		eos      []int32
		bos, tpl string
	}{
		{"none", piece, nil, []int32{1}, []int32{2}, "", ""}, // piece.json's post-processor puts <s> first; </s> ends text
		{"llama 2", piece, map[string]string{
			ConfigFile:     `{"add_bos_token": true, "add_eos_token": false, "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false}, "eos_token": "</s>", "unk_token": "<unk>", "pad_token": null, "chat_template": "{{ bos_token }}x"}`,
			GenerationFile: `{"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}`,
		}, []int32{1}, []int32{2}, "<s>", "{{ bos_token }}x"},
		{"no BOS added", piece, map[string]string{ConfigFile: `{"add_bos_token": false, "bos_token": "<s>", "eos_token": "</s>"}`}, nil, []int32{2}, "<s>", ""},
		{"eos list", gpt2, map[string]string{
			ConfigFile:       `{"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "chat_template": [{"name": "tool_use", "template": "t"}, {"name": "default", "template": "d"}]}`,
			GenerationFile:   `{"bos_token_id": 50256, "eos_token_id": [50255, 50256, 198]}`,
			ChatTemplateFile: "from the file",
		}, nil, []int32{50255, 50256, 198}, "<|endoftext|>", "from the file"},
		{"qwen2.5", gpt2, map[string]string{
			ConfigFile:     `{"add_bos_token": false, "bos_token": null, "eos_token": "<|endoftext|>", "chat_template": [{"name": "default", "template": "d"}]}`,
			GenerationFile: `{"bos_token_id": 50256, "eos_token_id": [13, 50256], "pad_token_id": 50256}`,
		}, nil, []int32{13, 50256}, "", "d"},
	} {
		dir := writeFiles(t, tc.files)
		c, err := ReadConfig(dir, tc.tok)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !slices.Equal(c.Begin, tc.begin) || !slices.Equal(c.EOS, tc.eos) || c.BOSText != tc.bos || c.ChatTemplate != tc.tpl {
			t.Errorf("%s: Begin %v, EOS %v, BOSText %q, template %q; want %v, %v, %q, %q", tc.name, c.Begin, c.EOS, c.BOSText, c.ChatTemplate, tc.begin, tc.eos, tc.bos, tc.tpl)
		}
	}
}

// TestReadConfigErrors checks that bad files are refused in one line
// naming the file and the field.
func TestReadConfigErrors(t *testing.T) {
	gpt2 := mustGPT2(t)
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"not JSON", map[string]string{ConfigFile: `{"bos_token": `}, "tokenizer_config.json: not valid JSON"},
		{"unknown token", map[string]string{ConfigFile: `{"eos_token": "<|im_end|>"}`}, `tokenizer_config.json: eos_token "<|im_end|>" is no token of the tokenizer gpt2`},
		{"token object", map[string]string{ConfigFile: `{"bos_token": {"id": 3}}`}, "tokenizer_config.json: bos_token"},
		{"add_bos without bos", map[string]string{ConfigFile: `{"add_bos_token": true}`}, "add_bos_token is true, but there is no bos_token"},
		{"template list", map[string]string{ConfigFile: `{"chat_template": [{"name": "rag", "template": "x"}]}`}, "chat_template: a list of templates without one named default"},
		{"eos out of range", map[string]string{GenerationFile: `{"eos_token_id": [2, 60000]}`}, "generation_config.json: eos_token_id 60000 is outside the vocabulary [0, 50257)"},
		{"eos not ids", map[string]string{GenerationFile: `{"eos_token_id": "</s>"}`}, `generation_config.json: eos_token_id "</s>": want an id or a list of ids`},
		{"bos out of range", map[string]string{GenerationFile: `{"bos_token_id": -1}`}, "generation_config.json: bos_token_id -1 is outside"},
	} {
		_, err := ReadConfig(writeFiles(t, tc.files), gpt2)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error = %v, want one line containing %q", tc.name, err, tc.want)
		}
	}
}
