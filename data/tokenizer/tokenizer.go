// Package tokenizer turns bytes into token ids and back.
//
// Two tokenizers are built in: [Byte], one token per byte (vocabulary 256),
// which accepts any input; and [GPT2], the byte-pair encoding of GPT-2
// (vocabulary 50257), whose vocabulary and merges come from the
// github.com/tiktoken-go/tokenizer module, compiled into the binary so that
// nothing is downloaded at run time. [BPE] reads any byte-level BPE
// tokenizer from a Hugging Face tokenizer.json ([Parse], [Open]), such as
// one that [Train] fits to a corpus. [Lookup] finds one by name, and
// [EndOfText] gives the token, if any, that separates documents.
package tokenizer

import (
	"context"
	"fmt"
	"strings"
)

// Tokenizer converts between bytes and token ids in [0, VocabSize()).
// Implementations are safe for concurrent use.
type Tokenizer interface {
	// Name is the name Lookup knows the tokenizer by; it identifies the
	// token ids in cache files and checkpoints.
	Name() string

	// VocabSize is one more than the largest token id.
	VocabSize() int

	// Encode appends the tokens of text to dst and returns the extended
	// slice. It accepts any bytes, including invalid UTF-8. It fails only
	// for a tokenizer read from a file whose pre-tokenizer pattern takes
	// longer than MatchTimeout over one match (a *PatternError), or when
	// ctx is done before a long encoding ends (ctx's error); the
	// tokenizers built in never fail.
	Encode(ctx context.Context, dst []int32, text []byte) ([]int32, error)

	// Decode appends the bytes of tokens to dst and returns the extended
	// slice. It fails on an id outside [0, VocabSize()), appending the
	// bytes of the tokens before it.
	Decode(dst []byte, tokens []int32) ([]byte, error)
}

// Default is the name of the default tokenizer.
const Default = "byte"

// Names lists the names Lookup accepts, Default first.
func Names() []string { return []string{Default, "gpt2"} }

// Lookup returns the tokenizer with the given name: "byte", "gpt2", or
// the name of a tokenizer parsed from a file in this process ([Parse]).
func Lookup(name string) (Tokenizer, error) {
	switch name {
	case "byte":
		return Byte, nil
	case "gpt2":
		return GPT2()
	}
	if t, ok := loaded.Load(name); ok {
		return t.(*BPE), nil
	}
	return nil, fmt.Errorf("unknown tokenizer %q: choose one of %s", name, strings.Join(Names(), ", "))
}

// EndOfText returns t's end-of-text token, the id that separates documents
// in a stream of tokens, and true; or false if t has none. A Tokenizer has
// one if it has a method EndOfText() int32 returning it: [GPT2] does
// (50256, which Decode turns into the text "<|endoftext|>"); [Byte] does
// not, as each of its 256 ids is a byte of text and none is left over.
func EndOfText(t Tokenizer) (id int32, ok bool) {
	if b, ok := t.(*BPE); ok && !b.hasEndOfText() {
		return 0, false
	}
	e, ok := t.(interface{ EndOfText() int32 })
	if !ok {
		return 0, false
	}
	return e.EndOfText(), true
}

// invalidToken is the error for an id outside the vocabulary.
func invalidToken(t Tokenizer, id int32) error {
	return fmt.Errorf("%s tokenizer: token id %d outside the vocabulary [0, %d)", t.Name(), id, t.VocabSize())
}

// Continue appends the tokens of text that continues a text whose start
// was encoded before, cut before a space that follows another character:
// t's method Continue if it has one ([BPE] does: a SentencePiece-kind
// file puts "▁" before a text, not before its continuation), else Encode.
// It fails as Encode does.
func Continue(ctx context.Context, t Tokenizer, dst []int32, text []byte) ([]int32, error) {
	if c, ok := t.(interface {
		Continue(context.Context, []int32, []byte) ([]int32, error)
	}); ok {
		return c.Continue(ctx, dst, text)
	}
	return t.Encode(ctx, dst, text)
}

// Text appends the text of tokens that start a text: t's method Text if
// it has one ([BPE] does), else Decode. Decode gives the bytes of each
// token, for text streamed token by token; Text gives a whole text as
// Hugging Face's libraries decode it.
func Text(t Tokenizer, dst []byte, tokens []int32) ([]byte, error) {
	if x, ok := t.(interface {
		Text([]byte, []int32) ([]byte, error)
	}); ok {
		return x.Text(dst, tokens)
	}
	return t.Decode(dst, tokens)
}
