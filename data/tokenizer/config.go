package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/polysketch/polysketch/internal/regular"
)

// The files beside a Hugging Face tokenizer.json that say what its special
// tokens are for and how a conversation is written out. ReadConfig reads
// them.
const (
	ConfigFile       = "tokenizer_config.json"
	GenerationFile   = "generation_config.json"
	ChatTemplateFile = "chat_template.jinja" // as transformers 4.43 and later save a template
)

// Config is how a model frames its text: the tokens put before a prompt,
// the tokens at which generation stops, and the template that writes a
// conversation out as text.
type Config struct {
	// Begin holds the ids put before a prompt: the beginning-of-sequence
	// token where the tokenizer adds it (Llama's <s>, Llama 3's
	// <|begin_of_text|>), else none.
	Begin []int32
	// EOS holds the ids at which generation stops: generation_config's
	// eos_token_id (one or several) and tokenizer_config's eos_token; the
	// tokenizer's end-of-text token (EndOfText) without those files.
	EOS []int32
	// BOSText and EOSText are the texts of tokenizer_config's bos_token
	// and eos_token, as a chat template reads them; "" if none.
	BOSText, EOSText string
	// Special holds tokenizer_config's other special tokens by their
	// names (unk_token, pad_token), for a chat template.
	Special map[string]string
	// ChatTemplate is the model's chat template (Jinja): chat_template.jinja,
	// or tokenizer_config's chat_template; "" if it has none.
	ChatTemplate string
}

// configJSON is the part of tokenizer_config.json that ReadConfig reads.
type configJSON struct {
	BOS          json.RawMessage `json:"bos_token"`
	EOS          json.RawMessage `json:"eos_token"`
	UNK          json.RawMessage `json:"unk_token"`
	PAD          json.RawMessage `json:"pad_token"`
	AddBOS       *bool           `json:"add_bos_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
}

// generationJSON is the part of generation_config.json that ReadConfig
// reads.
type generationJSON struct {
	BOS *int64          `json:"bos_token_id"`
	EOS json.RawMessage `json:"eos_token_id"` // an id, a list of ids, or null
}

// ReadConfig returns the Config of tokenizer t from the files in dir
// (tokenizer_config.json, generation_config.json, chat_template.jinja),
// any or all of which may be missing. Without them a Config has t's
// end-of-text token as its EOS, the post-processor's tokens as its Begin
// (see BPE.Wrap), and no template.
func ReadConfig(dir string, t Tokenizer) (*Config, error) {
	c := DefaultConfig(t)
	var tc configJSON
	found, err := readJSON(dir, ConfigFile, &tc)
	if err != nil {
		return nil, err
	}
	bos := int32(-1)
	if found {
		file := filepath.Join(dir, ConfigFile)
		for _, f := range []struct {
			name string
			raw  json.RawMessage
			text *string
		}{{"bos_token", tc.BOS, &c.BOSText}, {"eos_token", tc.EOS, &c.EOSText}, {"unk_token", tc.UNK, nil}, {"pad_token", tc.PAD, nil}} {
			s, err := tokenText(f.raw)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", file, f.name, err)
			}
			if s == "" {
				continue
			}
			c.Special[f.name] = s
			if f.text == nil {
				continue
			}
			*f.text = s
			id, ok := tokenID(t, s)
			if !ok {
				return nil, fmt.Errorf("%s: %s %q is no token of the tokenizer %s", file, f.name, s, t.Name())
			}
			if f.name == "bos_token" {
				bos = id
			} else {
				c.EOS = []int32{id}
			}
		}
		if tc.AddBOS != nil {
			// As transformers rebuilds Llama's post-processor from it.
			c.Begin = slices.DeleteFunc(c.Begin, func(id int32) bool { return id == bos })
			if *tc.AddBOS {
				if bos < 0 {
					return nil, fmt.Errorf("%s: add_bos_token is true, but there is no bos_token", file)
				}
				c.Begin = append([]int32{bos}, c.Begin...)
			}
		}
		if c.ChatTemplate, err = chatTemplate(tc.ChatTemplate); err != nil {
			return nil, fmt.Errorf("%s: chat_template: %w", file, err)
		}
	}
	if s, err := regular.ReadFile(filepath.Join(dir, ChatTemplateFile)); err == nil {
		c.ChatTemplate = string(s)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var gc generationJSON
	if found, err = readJSON(dir, GenerationFile, &gc); err != nil || !found {
		return c, err
	}
	file := filepath.Join(dir, GenerationFile)
	var eos []int32
	if len(gc.EOS) > 0 && string(gc.EOS) != "null" {
		var one int64
		var list []int64
		if json.Unmarshal(gc.EOS, &one) == nil {
			list = []int64{one}
		} else if err := json.Unmarshal(gc.EOS, &list); err != nil {
			return nil, fmt.Errorf("%s: eos_token_id %s: want an id or a list of ids", file, gc.EOS)
		}
		for _, id := range list {
			if id < 0 || id >= int64(t.VocabSize()) {
				return nil, fmt.Errorf("%s: eos_token_id %d is outside the vocabulary [0, %d) of the tokenizer %s", file, id, t.VocabSize(), t.Name())
			}
			eos = append(eos, int32(id))
		}
	}
	if gc.BOS != nil && (*gc.BOS < 0 || *gc.BOS >= int64(t.VocabSize())) {
		return nil, fmt.Errorf("%s: bos_token_id %d is outside the vocabulary [0, %d) of the tokenizer %s", file, *gc.BOS, t.VocabSize(), t.Name())
	}
	// Generation stops at any end the two files name.
	for _, id := range c.EOS {
		if !slices.Contains(eos, id) {
			eos = append(eos, id)
		}
	}
	if eos != nil {
		c.EOS = eos
	}
	return c, nil
}

// DefaultConfig returns the Config of tokenizer t alone, without the
// files ReadConfig reads: t's end-of-text token as its EOS, the tokens its
// post-processor puts before a text as its Begin (see BPE.Wrap), no chat
// template.
func DefaultConfig(t Tokenizer) *Config {
	c := &Config{Special: map[string]string{}}
	if eot, ok := EndOfText(t); ok {
		c.EOS = []int32{eot}
	}
	if b, ok := t.(*BPE); ok {
		begin, _ := b.Wrap()
		c.Begin = slices.Clone(begin)
	}
	return c
}

// readJSON reads the JSON file name in dir into v and reports whether it
// was there.
func readJSON(dir, name string, v any) (bool, error) {
	path := filepath.Join(dir, name)
	b, err := regular.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("tokenizer: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%s: not valid JSON of a Hugging Face %s: %v", path, name, err)
	}
	return true, nil
}

// tokenText returns the text of a special token as tokenizer_config.json
// gives it: a string, an AddedToken object with its content, or null.
func tokenText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var a struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &a) != nil || a.Content == nil {
		return "", fmt.Errorf("%s: want a string or an object with its content", raw)
	}
	return *a.Content, nil
}

// tokenID returns the id of the token whose text is s: an added token, or
// a token of the vocabulary; for a built-in tokenizer, its end-of-text
// token if that is s, or the one token s encodes to.
func tokenID(t Tokenizer, s string) (int32, bool) {
	if b, ok := t.(*BPE); ok {
		for _, a := range b.added {
			if string(a.content) == s {
				return a.id, true
			}
		}
		id, ok := b.vocab[s]
		return id, ok
	}
	if eot, ok := EndOfText(t); ok {
		if b, err := t.Decode(nil, []int32{eot}); err == nil && string(b) == s {
			return eot, true
		}
	}
	// Built in: Byte or GPT2, whose encoding never fails.
	if ids, err := t.Encode(context.Background(), nil, []byte(s)); err == nil && len(ids) == 1 {
		return ids[0], true
	}
	return 0, false
}

// chatTemplate returns the template of a tokenizer_config.json's
// chat_template: a string, or a list of named templates, of which
// transformers uses the one named default.
func chatTemplate(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", errors.New("want a string or a list of {name, template}")
	}
	for _, t := range list {
		if t.Name == "default" {
			return t.Template, nil
		}
	}
	return "", errors.New("a list of templates without one named default")
}
