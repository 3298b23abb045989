// Command makepiece writes piece.json, the small tokenizer.json of the
// SentencePiece kind (Llama 2, TinyLlama, Mistral) that data/tokenizer's
// tests and hf.mjs use, from a byte-level tokenizer.json that
// `polysketch tokenizer train` wrote:
//
//	polysketch tokenizer train --corpus data/tokenizer --vocab-size 700 --out /tmp/bl
//	go run ./data/tokenizer/testdata/makepiece /tmp/bl/tokenizer.json > data/tokenizer/testdata/piece.json
//
// The file is laid out as Hugging Face's converter lays out Llama 2's:
// <unk>, <s> and </s>, the 256 byte tokens <0x00> to <0xFF>, then
// characters and merged tokens with spaces written as "▁"; a Prepend and
// Replace normalizer, no pre-tokenizer, a TemplateProcessing post-processor
// putting <s> first, and the decoders Replace, ByteFallback, Fuse and Strip.
// Its characters leave out controls (so "\n" is a byte token, as in
// Llama 2's), Han, kana and emoji, which the byte fallback must encode.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

func main() {
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail(err)
	}
	var src struct {
		Model struct {
			Vocab  map[string]int  `json:"vocab"`
			Merges json.RawMessage `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(b, &src); err != nil {
		fail(err)
	}
	var merges []string
	if err := json.Unmarshal(src.Model.Merges, &merges); err != nil {
		fail(err)
	}
	// The byte-level alphabet: printable Latin-1 for itself, the rest
	// from U+0100 up, in byte order.
	byteOf := map[rune]byte{}
	next := rune(256)
	for c := range 256 {
		r := rune(c)
		if !(c >= '!' && c <= '~' || c >= 0xa1 && c <= 0xac || c >= 0xae && c <= 0xff) {
			r = next
			next++
		}
		byteOf[r] = byte(c)
	}
	// piece returns the SentencePiece form of a byte-level token, or false
	// if it is not text polysketch's fixture keeps.
	piece := func(s string) (string, bool) {
		var bs []byte
		for _, r := range s {
			bs = append(bs, byteOf[r])
		}
		t := string(bs)
		if !utf8.ValidString(t) || t == "" {
			return "", false
		}
		for i, r := range t {
			if r == ' ' && i > 0 && t[i-1] != ' ' {
				return "", false // a space leads a piece only
			}
			if unicode.IsControl(r) || unicode.Is(unicode.Han, r) || unicode.In(r, unicode.Hiragana, unicode.Katakana) || r >= 0x1F000 {
				return "", false
			}
		}
		return strings.ReplaceAll(t, " ", "▁"), true
	}
	vocab := map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2}
	order := []string{"<unk>", "<s>", "</s>"}
	add := func(s string) {
		if _, ok := vocab[s]; !ok {
			vocab[s] = len(order)
			order = append(order, s)
		}
	}
	for c := range 256 {
		add(fmt.Sprintf("<0x%02X>", c))
	}
	// Characters first, in the order of their first token, then merges.
	type tok struct {
		s  string
		id int
	}
	var toks []tok
	for s, id := range src.Model.Vocab {
		toks = append(toks, tok{s, id})
	}
	sort.Slice(toks, func(i, j int) bool { return toks[i].id < toks[j].id })
	for _, t := range toks {
		if p, ok := piece(t.s); ok {
			for _, r := range p {
				add(string(r))
			}
		}
	}
	var out []string
	for _, m := range merges {
		a, b, _ := strings.Cut(m, " ")
		pa, okA := piece(a)
		pb, okB := piece(b)
		if !okA || !okB || strings.HasPrefix(pb, "▁") && !strings.HasSuffix(pa, "▁") {
			continue // "▁" inside a word
		}
		_, hasA := vocab[pa]
		_, hasB := vocab[pb]
		if !hasA || !hasB {
			continue
		}
		add(pa + pb)
		out = append(out, pa+" "+pb)
	}
	added := []map[string]any{}
	for id, s := range []string{"<unk>", "<s>", "</s>"} {
		added = append(added, map[string]any{"id": id, "content": s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true})
	}
	f := map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"pre_tokenizer": nil,
		"post_processor": map[string]any{
			"type":           "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair":           []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 1}}, map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}},
			"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []int{1}, "tokens": []string{"<s>"}}},
		},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": "<unk>", "continuing_subword_prefix": nil, "end_of_word_suffix": nil,
			"fuse_unk": true, "byte_fallback": true, "vocab": vocab, "merges": out,
		},
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(f); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "makepiece:", err)
	os.Exit(1)
}
