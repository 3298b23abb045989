package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The SentencePiece kind of tokenizer.json, converted from a SentencePiece
// model (Llama 2, TinyLlama, Mistral): a BPE over characters rather than
// bytes, with byte_fallback (a character missing from the vocabulary is
// its UTF-8 bytes as the tokens <0x00> to <0xFF>), spaces written as "▁"
// (U+2581) by a Replace normalizer or a Metaspace pre-tokenizer, and a
// "▁" put before the text by a Prepend normalizer or by Metaspace. Its
// decoder turns "▁" back into a space, byte tokens into their bytes, and
// strips the space put before the text.

// piece holds what a file of the SentencePiece kind says beyond the
// model's vocabulary and merges.
type piece struct {
	norm []normStep // the normalizer's steps, in order
	// The Metaspace pre-tokenizer's replacement for a space, and when it
	// puts one before a section of text; 0 without one.
	meta   rune
	scheme prependScheme
	// strip is how many spaces the decoder strips from the start of a
	// text (Strip after Fuse, or Metaspace).
	strip int
}

type normStep struct {
	prepend  bool   // Prepend old; else Replace old with new
	old, new []byte // of Replace; old alone for Prepend
}

type prependScheme uint8

const (
	prependAlways prependScheme = iota
	prependFirst                // only before the section at the start of the text
	prependNever
)

// metaJSON is the Metaspace pre-tokenizer or decoder.
type metaJSON struct {
	Type           string `json:"type"`
	Replacement    string `json:"replacement"`
	PrependScheme  string `json:"prepend_scheme"`
	AddPrefixSpace *bool  `json:"add_prefix_space"`
	Split          *bool  `json:"split"`
}

func (m *metaJSON) scheme() (prependScheme, error) {
	switch m.PrependScheme {
	case "always":
		return prependAlways, nil
	case "first":
		return prependFirst, nil
	case "never":
		return prependNever, nil
	case "":
		if m.AddPrefixSpace != nil && !*m.AddPrefixSpace {
			return prependNever, nil
		}
		return prependAlways, nil
	}
	return 0, fmt.Errorf("Metaspace prepend_scheme %q is not supported: want always, first or never", m.PrependScheme)
}

// replaceJSON is a Replace normalizer or decoder.
type replaceJSON struct {
	Pattern struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"`
	Content string `json:"content"`
}

func (r *replaceJSON) pair(what string) (old, new []byte, err error) {
	if r.Pattern.String == nil || *r.Pattern.String == "" {
		return nil, nil, fmt.Errorf("%s Replace: only a non-empty String pattern is supported", what)
	}
	return []byte(*r.Pattern.String), []byte(r.Content), nil
}

// readPiece reads the normalizer, pre-tokenizer, decoder and vocabulary of
// a file of the SentencePiece kind.
func (t *BPE) readPiece(f *fileJSON) error {
	p := &piece{}
	t.piece = p
	if err := p.readNormalizer(f.Normalizer); err != nil {
		return err
	}
	if len(f.PreTokenizer) > 0 && string(f.PreTokenizer) != "null" {
		var m metaJSON
		if err := json.Unmarshal(f.PreTokenizer, &m); err != nil {
			return fmt.Errorf("pre_tokenizer: %v", err)
		}
		if m.Type != "Metaspace" {
			return fmt.Errorf("pre-tokenizer type %s is not supported with byte_fallback: polysketch reads none, or Metaspace", m.Type)
		}
		if m.Split == nil || *m.Split {
			return errors.New("pre-tokenizer Metaspace with split true is not supported: polysketch reads split false, as Hugging Face's converters write it for BPE models")
		}
		r, n := utf8.DecodeRuneInString(m.Replacement)
		if r == utf8.RuneError || n != len(m.Replacement) {
			return fmt.Errorf("pre-tokenizer Metaspace: replacement %q is not one character", m.Replacement)
		}
		var err error
		if p.scheme, err = m.scheme(); err != nil {
			return fmt.Errorf("pre-tokenizer %v", err)
		}
		p.meta = r
	}
	replace, err := p.readDecoder(f.Decoder)
	if err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	if err := t.sizeTokens(f); err != nil {
		return err
	}
	m := f.Model
	t.vocab = make(map[string]int32, len(m.Vocab))
	for s, id := range m.Vocab {
		t.vocab[s] = id
		t.tokens[id] = []byte(s)
		if b, ok := byteToken(s); ok && replace.bytes {
			t.tokens[id] = []byte{b}
			continue
		}
		for _, r := range replace.steps {
			t.tokens[id] = bytes.ReplaceAll(t.tokens[id], r.old, r.new)
		}
	}
	for b := range t.byteID {
		name := fmt.Sprintf("<0x%02X>", b)
		id, ok := m.Vocab[name]
		if !ok {
			return fmt.Errorf("vocabulary has no byte token %s: polysketch reads byte_fallback files with all 256", name)
		}
		t.byteID[b] = id
	}
	return nil
}

func (p *piece) readNormalizer(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var n struct {
		Type        string            `json:"type"`
		Prepend     string            `json:"prepend"`
		Normalizers []json.RawMessage `json:"normalizers"`
		replaceJSON
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("normalizer: %v", err)
	}
	switch n.Type {
	case "Prepend":
		p.norm = append(p.norm, normStep{prepend: true, old: []byte(n.Prepend)})
	case "Replace":
		old, new, err := n.pair("normalizer")
		if err != nil {
			return err
		}
		p.norm = append(p.norm, normStep{old: old, new: new})
	case "Sequence":
		for _, s := range n.Normalizers {
			if err := p.readNormalizer(s); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("normalizer type %s is not supported with byte_fallback: polysketch reads Prepend, Replace, or a Sequence of them", n.Type)
	}
	return nil
}

// tokenDecoding is what a decoder does to each token on its own.
type tokenDecoding struct {
	steps []normStep // Replace steps
	bytes bool       // ByteFallback: <0xAB> is the byte 0xAB
}

// readDecoder reads the decoder into what it does to each token, and the
// spaces it strips from the start of a text into p.strip. It reads the
// decoders Hugging Face's converters write: a Sequence of Replace,
// ByteFallback and Fuse, then Strip; or Metaspace.
func (p *piece) readDecoder(raw json.RawMessage) (tokenDecoding, error) {
	var d tokenDecoding
	if len(raw) == 0 || string(raw) == "null" {
		return d, nil
	}
	var top struct {
		Type     string            `json:"type"`
		Decoders []json.RawMessage `json:"decoders"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return d, err
	}
	list := []json.RawMessage{raw}
	if top.Type == "Sequence" {
		list = top.Decoders
	}
	fused := false
	for _, r := range list {
		var s struct {
			Type  string `json:"type"`
			Start int    `json:"start"`
			Stop  int    `json:"stop"`
			replaceJSON
		}
		if err := json.Unmarshal(r, &s); err != nil {
			return d, err
		}
		switch {
		case s.Type == "Replace" && !fused:
			old, new, err := s.pair("decoder")
			if err != nil {
				return d, err
			}
			d.steps = append(d.steps, normStep{old: old, new: new})
		case s.Type == "ByteFallback" && !fused:
			d.bytes = true
		case s.Type == "Fuse":
			fused = true
		case s.Type == "Strip" && fused && s.Content == " " && s.Stop == 0 && s.Start >= 0:
			p.strip = s.Start
		case s.Type == "Metaspace" && len(list) == 1:
			var m metaJSON
			if err := json.Unmarshal(r, &m); err != nil {
				return d, err
			}
			scheme, err := m.scheme()
			if err != nil {
				return d, err
			}
			if m.Replacement == "" {
				m.Replacement = "▁"
			}
			d.steps = append(d.steps, normStep{old: []byte(m.Replacement), new: []byte(" ")})
			if scheme != prependNever {
				p.strip = 1
			}
		case s.Type == "Strip":
			return d, fmt.Errorf("Strip of %q, start %d, stop %d, is not supported: polysketch reads a Strip of spaces from the start, after Fuse", s.Content, s.Start, s.Stop)
		default:
			return d, fmt.Errorf("%s is not supported here: polysketch reads a Sequence of Replace, ByteFallback, Fuse and Strip, or Metaspace", s.Type)
		}
	}
	return d, nil
}

// byteToken returns the byte that a token <0xAB> stands for.
func byteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	b, err := strconv.ParseUint(s[3:5], 16, 8)
	return byte(b), err == nil
}

// normalize returns section, a part of the text between added tokens, as
// the normalizer and the Metaspace pre-tokenizer leave it. Nothing is put
// before a section that continues text encoded before.
func (p *piece) normalize(section []byte, pos position) []byte {
	s := section
	for _, n := range p.norm {
		if n.prepend {
			if pos == continued {
				continue
			}
			s = append(append([]byte(nil), n.old...), s...)
		} else {
			s = bytes.ReplaceAll(s, n.old, n.new)
		}
	}
	if p.meta != 0 {
		meta := string(p.meta)
		s = bytes.ReplaceAll(s, []byte(" "), []byte(meta))
		put := p.scheme == prependAlways && pos != continued || p.scheme == prependFirst && pos == atStart
		if put && !bytes.HasPrefix(s, []byte(meta)) {
			s = append([]byte(meta), s...)
		}
	}
	return s
}

// encodeSection appends the tokens of section, text between added tokens
// (any bytes) at pos. The section is one
// piece: the characters of its normalized text that are tokens, the bytes
// of the others (and the bytes of invalid UTF-8) as byte tokens, merged.
func (t *BPE) encodeSection(dst []int32, section []byte, pos position, c *bpeCache) []int32 {
	if len(section) == 0 {
		return dst
	}
	s := t.piece.normalize(section, pos)
	if sp, ok := c.pieces.index[string(s)]; ok {
		return append(dst, c.pieces.ids[sp.off:sp.off+sp.n]...)
	}
	start := len(dst)
	if id, ok := t.vocab[string(s)]; ok && t.ignoreMerges && utf8.Valid(s) {
		dst = append(dst, id)
	} else {
		syms := c.syms[:0]
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRune(s[i:])
			id, ok := t.vocab[string(s[i:i+n])]
			if r == utf8.RuneError && n == 1 || !ok {
				for _, b := range s[i : i+n] {
					syms = append(syms, symbol{id: t.byteID[b]})
				}
			} else {
				syms = append(syms, symbol{id: id})
			}
			i += n
		}
		dst = t.mergeSymbols(dst, syms, c)
	}
	c.pieces.add(s, dst[start:])
	return dst
}

// textStart returns how many bytes of the decoded tokens ids, the start
// of a text, the decoder strips: the spaces before the first word.
func (t *BPE) textStart(decoded []byte) int {
	if t.piece == nil {
		return 0
	}
	n := 0
	for n < t.piece.strip && n < len(decoded) && decoded[n] == ' ' {
		n++
	}
	return n
}
