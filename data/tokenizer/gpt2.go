package tokenizer

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer/codec"
)

// GPT-2's vocabulary: 50256 byte-pair tokens and the end-of-text token,
// id 50256 in GPT-2's encoder.json. The module knows the id only privately,
// so it is a constant here; the tests check it against the module's
// vocabulary.
const (
	gpt2Vocab     = 50257
	gpt2EndOfText = 50256
)

// GPT2 returns the GPT-2 byte-pair encoding tokenizer: tiktoken's
// r50k_base, which has GPT-2's ranks and split pattern. "Hello world" is
// [15496 995].
//
// Encode splits valid UTF-8 into pieces as GPT-2's pattern does and merges
// each piece with the module's byte-pair encoder, remembering the tokens of
// pieces already seen. Most pieces of real text recur, so this is about ten
// times faster than the module's own encoder on whole texts, with the same
// ids: the tests compare the two on every Unicode character and on Go
// source.
//
// It departs from the module in two ways, so that any bytes round-trip:
// Decode(Encode(b)) == b. Where the module would replace invalid UTF-8
// with U+FFFD, each byte of an invalid sequence becomes the token of that
// single byte (GPT-2 has one for every byte), and the valid text on either
// side is encoded as if the input ended or started there. And DEL (0x7f),
// which the module drops, is kept, as GPT-2 keeps it.
//
// Encode never produces the end-of-text token 50256: the text
// "<|endoftext|>" is encoded as ordinary text. Decode turns 50256 into that
// text, and [EndOfText] returns it, for putting between documents as
// GPT-2's training did.
func GPT2() (Tokenizer, error) { return loadGPT2() }

var loadGPT2 = sync.OnceValues(func() (Tokenizer, error) {
	// codec.NewR50kBase rather than tokenizer.Get keeps the other
	// encodings' vocabularies out of the binary.
	r50k := codec.NewR50kBase()
	g := &gpt2{codec: r50k, offsets: make([]uint32, 1, gpt2Vocab+1)}
	for b := range g.byteID {
		g.byteID[b] = -1
	}
	for id := range uint(gpt2EndOfText) {
		s, err := r50k.Decode([]uint{id})
		if err != nil {
			return nil, fmt.Errorf("gpt2 tokenizer: vocabulary has no token %d: %w", id, err)
		}
		if len(s) == 1 {
			g.byteID[s[0]] = int32(id)
		}
		g.bytes = append(g.bytes, s...)
		g.offsets = append(g.offsets, uint32(len(g.bytes)))
	}
	g.bytes = append(g.bytes, "<|endoftext|>"...)
	g.offsets = append(g.offsets, uint32(len(g.bytes)))
	for b, id := range g.byteID {
		if id < 0 {
			return nil, fmt.Errorf("gpt2 tokenizer: vocabulary has no token for byte %#02x", b)
		}
	}
	// The work-around for the module dropping DEL (see encodePiece) is
	// exact only if no token but DEL's own contains it.
	for id := range gpt2EndOfText {
		t := g.bytes[g.offsets[id]:g.offsets[id+1]]
		if len(t) > 1 && bytes.IndexByte(t, del) >= 0 {
			return nil, fmt.Errorf("gpt2 tokenizer: token %d %q contains DEL", id, t)
		}
	}
	g.caches.New = func() any { return newPieceCache() }
	return g, nil
})

type gpt2 struct {
	codec *codec.Codec

	// Token id i is bytes[offsets[i]:offsets[i+1]].
	bytes   []byte
	offsets []uint32

	// byteID[b] is the token of the single byte b.
	byteID [256]int32

	// caches holds *pieceCache: one per concurrent Encode, so that
	// encoders never contend for a lock.
	caches sync.Pool
}

func (*gpt2) Name() string   { return "gpt2" }
func (*gpt2) VocabSize() int { return gpt2Vocab }

// EndOfText returns the end-of-text token; see [EndOfText].
func (*gpt2) EndOfText() int32 { return gpt2EndOfText }

func (g *gpt2) Decode(dst []byte, tokens []int32) ([]byte, error) {
	for _, id := range tokens {
		if uint32(id) >= gpt2Vocab {
			return dst, invalidToken(g, id)
		}
		dst = append(dst, g.bytes[g.offsets[id]:g.offsets[id+1]]...)
	}
	return dst, nil
}

func (g *gpt2) Encode(_ context.Context, dst []int32, text []byte) ([]int32, error) {
	c := g.caches.Get().(*pieceCache)
	defer g.caches.Put(c)
	for len(text) > 0 {
		n := validPrefix(text)
		for s := text[:n]; len(s) > 0; {
			p := pieceLen(s)
			dst = g.encodePiece(dst, s[:p], c)
			s = s[p:]
		}
		if n < len(text) {
			dst = append(dst, g.byteID[text[n]])
			n++
		}
		text = text[n:]
	}
	return dst, nil
}

// del is the ASCII control character DEL (0x7f). The module's compiled
// pattern leaves it out of [^\s\p{L}\p{N}] and so drops it from its
// output, where GPT-2 keeps it in a piece of "other" characters. No token
// but DEL's own contains DEL, so no merge crosses it: encoding the parts of
// a piece on either side of DEL separately gives GPT-2's ids.
const del = 0x7f

// encodePiece appends the tokens of one piece of the split.
func (g *gpt2) encodePiece(dst []int32, piece []byte, c *pieceCache) []int32 {
	for {
		i := bytes.IndexByte(piece, del)
		if i < 0 {
			break
		}
		if i > 0 {
			dst = g.encodePiece(dst, piece[:i], c)
		}
		dst = append(dst, g.byteID[del])
		piece = piece[i+1:]
	}
	switch len(piece) {
	case 0:
		return dst
	case 1:
		return append(dst, g.byteID[piece[0]])
	}
	if sp, ok := c.index[string(piece)]; ok {
		return append(dst, c.ids[sp.off:sp.off+sp.n]...)
	}
	ids, _, err := g.codec.Encode(string(piece))
	if err != nil {
		// The module fails only on invalid UTF-8 in strict mode, which
		// is not the mode used here.
		panic(fmt.Sprintf("gpt2 tokenizer: encoding %q: %v", piece, err))
	}
	start, n := len(dst), 0
	for _, id := range ids {
		dst = append(dst, int32(id))
		n += int(g.offsets[id+1] - g.offsets[id])
	}
	if n != len(piece) {
		// The module lost bytes, as it does DEL. The tests find no other
		// such case, but Encode promises a round trip: fall back to one
		// token per byte.
		dst = dst[:start]
		for _, b := range piece {
			dst = append(dst, g.byteID[b])
		}
	}
	c.add(piece, dst[start:])
	return dst
}

// pieceCache remembers the tokens of pieces already encoded. It is bounded:
// when full it starts over.
type pieceCache struct {
	index map[string]span
	ids   []int32
}

type span struct{ off, n uint32 }

const (
	maxCachedPieces = 1 << 16
	maxCachedLen    = 64 // bytes; longer pieces are rare and go to the module
)

func newPieceCache() *pieceCache {
	return &pieceCache{index: make(map[string]span, 1024)}
}

func (c *pieceCache) add(piece []byte, ids []int32) {
	if len(piece) > maxCachedLen {
		return
	}
	if len(c.index) >= maxCachedPieces {
		clear(c.index)
		c.ids = c.ids[:0]
	}
	c.index[string(piece)] = span{uint32(len(c.ids)), uint32(len(ids))}
	c.ids = append(c.ids, ids...)
}

// validPrefix returns the length of the longest prefix of s that is valid
// UTF-8.
func validPrefix(s []byte) int {
	i := 0
	for i < len(s) {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return i
}

// Character classes of GPT-2's split pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// as the module's regular expression engine defines them: \p{L} and \p{N}
// are the Unicode categories, \s is unicode.IsSpace.
const (
	other = iota
	letter
	number
	space
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for b := range utf8.RuneSelf {
		t[b] = runeClass(rune(b))
	}
	return t
}()

func runeClass(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return letter
	case unicode.IsNumber(r):
		return number
	case unicode.IsSpace(r):
		return space
	}
	return other
}

// class returns the class of the first character of s (valid UTF-8) and its
// length in bytes.
func class(s []byte) (uint8, int) {
	if s[0] < utf8.RuneSelf {
		return asciiClass[s[0]], 1
	}
	r, n := utf8.DecodeRune(s)
	return runeClass(r), n
}

// pieceLen returns the length in bytes of the first piece of s (valid,
// non-empty UTF-8) under GPT-2's split pattern: the first alternative of the
// pattern that matches at the start of s, as a backtracking engine finds it.
func pieceLen(s []byte) int {
	if s[0] == '\'' && len(s) > 1 {
		switch s[1] {
		case 's', 't', 'm', 'd':
			return 2
		case 'r', 'v':
			if len(s) > 2 && s[2] == 'e' {
				return 3
			}
		case 'l':
			if len(s) > 2 && s[2] == 'l' {
				return 3
			}
		}
	}
	cls, i := class(s)
	if s[0] == ' ' && len(s) > 1 {
		// " ?" lets one space lead a run of letters, numbers or others.
		if c, _ := class(s[1:]); c != space {
			cls = c
		}
	}
	if cls != space {
		for i < len(s) {
			c, n := class(s[i:])
			if c != cls {
				break
			}
			i += n
		}
		return i
	}
	// \s+(?!\S) takes a run of spaces that ends the text, or all of a run
	// but its last character, which is left to lead what follows; \s+
	// takes a lone space before a non-space.
	last := 0
	for i < len(s) {
		c, n := class(s[i:])
		if c != space {
			break
		}
		last = i
		i += n
	}
	if i == len(s) || last == 0 {
		return i
	}
	return last
}
