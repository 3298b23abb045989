package hf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/polysketch/polysketch/internal/regular"
	"github.com/polysketch/polysketch/model"
)

// Import is a Hugging Face model directory read into a polysketch model.
type Import struct {
	*Config
	// Model holds the checkpoint's weights in float32.
	Model *model.Model
	// DTypes counts the tensors read by dtype ("BF16": 272, …).
	DTypes map[string]int
	// Tokenizer is the directory's tokenizer.json, nil if it has none.
	Tokenizer []byte
	// Files are its tokenizer_config.json, generation_config.json and
	// chat_template.jinja, those present, as they are.
	Files map[string][]byte
}

// Read reads the model directory dir: config.json, then the headers of
// its safetensors weights (model.safetensors, or the shards of
// model.safetensors.index.json), each tensor's name, dtype and shape
// checked against the configuration before the model is allocated, then
// the weights into a model of that configuration, and the tokenizer files.
// Errors are one line naming the file and the problem.
func Read(dir string, opts Options) (*Import, error) {
	cfg, err := ReadConfig(dir, opts)
	if err != nil {
		return nil, err
	}
	s, err := openShards(dir)
	if err != nil {
		return nil, err
	}
	defer s.close()
	prefix := ""
	if _, ok := s.where["transformer.wte.weight"]; ok && cfg.Type == "gpt2" {
		prefix = "transformer."
	}
	ps := placements(cfg.Type, cfg.Model, prefix)
	if err := s.check(dir, cfg.Type, cfg.Model, ps); err != nil {
		return nil, err
	}
	m, err := model.NewEmpty(cfg.Model)
	if err != nil {
		return nil, err
	}
	if err := s.read(ps, m); err != nil {
		return nil, err
	}
	imp := &Import{Config: cfg, Model: m, DTypes: map[string]int{}, Files: map[string][]byte{}}
	for _, p := range ps {
		info, _ := s.where[p.name].Lookup(p.name)
		imp.DTypes[info.DType]++
	}
	if imp.Tokenizer, err = readOptional(dir, TokenizerFile); err != nil {
		return nil, err
	}
	for _, name := range []string{TokenizerCfg, GenerationFile, ChatTemplate} {
		b, err := readOptional(dir, name)
		if err != nil {
			return nil, err
		}
		if b != nil {
			imp.Files[name] = b
		}
	}
	return imp, nil
}

// maxSideFile bounds the tokenizer and configuration files read whole.
const maxSideFile = 256 << 20

// readOptional reads dir's file name, nil if there is none.
func readOptional(dir, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > maxSideFile {
		return nil, fmt.Errorf("%s: not a regular file of at most %d MiB", path, maxSideFile>>20)
	}
	return regular.ReadFile(path)
}
