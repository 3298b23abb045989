package tokenizer

import (
	"context"
	"slices"
)

// Byte is the byte-level tokenizer: token i is the byte i, so any input,
// including invalid UTF-8, round-trips exactly.
var Byte Tokenizer = byteTokenizer{}

type byteTokenizer struct{}

func (byteTokenizer) Name() string   { return "byte" }
func (byteTokenizer) VocabSize() int { return 256 }

func (byteTokenizer) Encode(_ context.Context, dst []int32, text []byte) ([]int32, error) {
	n := len(dst)
	dst = slices.Grow(dst, len(text))[:n+len(text)]
	for i, b := range text {
		dst[n+i] = int32(b)
	}
	return dst, nil
}

func (t byteTokenizer) Decode(dst []byte, tokens []int32) ([]byte, error) {
	dst = slices.Grow(dst, len(tokens))
	for _, id := range tokens {
		if uint32(id) > 255 {
			return dst, invalidToken(t, id)
		}
		dst = append(dst, byte(id))
	}
	return dst, nil
}
