package tokenizer

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dlclark/regexp2/v2"
)

// TestLlamaPieceLen checks the hand-written split of Llama-3's and Qwen2's
// patterns against the patterns themselves, matched by regexp2, on random
// text mixing letters, digits, white space of every kind, punctuation,
// contractions in either case, and non-ASCII of each class.
//
// Line breaks and DEL are left out, as regexp2 (v2.5.1) matches them
// unlike Oniguruma (the Rust library's engine) and JavaScript: it leaves
// DEL out of [^\s\p{L}\p{N}], and \s*[\r\n]+ takes the shortest match
// ("\r \r}" gives "\r", not "\r \r"). TestLlamaLineBreaks checks those
// by hand, and hf.mjs against @huggingface/tokenizers.
func TestLlamaPieceLen(t *testing.T) {
	alphabet := []string{"a", "Z", "q", "é", "ß", "中", "ж", "0", "7", "٣", "½", "Ⅻ", " ", " ", "  ", "\t", "\v", "\f",
		"\u00a0", "\u2003", "\u3000", "\u2028", "'", "'s", "'S", "'re", "'RE", "'Ve", "'ll", "'LL", "'d", "'M", "'t", "'x", ".", ",", "(", ")", "{", "}",
		"\"", "!", "-", "_", "😀", "\u0301", "\x00", "<|x|>"}
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		pattern string
		digits  int
	}{{llama3Split, 3}, {qwen2Split, 1}} {
		re := regexp2.MustCompile(tc.pattern, regexp2.None)
		t0 := &BPE{}
		c := &bpeCache{}
		st := &step{kind: splitRegex, re: re}
		for range 5000 {
			var s []byte
			for range 1 + r.IntN(25) {
				s = append(s, alphabet[r.IntN(len(alphabet))]...)
			}
			var want, got []int
			t0.matches(context.Background(), st, s, c, func(start, end int) error { want = append(want, end); return nil })
			for i := 0; i < len(s); {
				i += llamaPieceLen(s[i:], tc.digits)
				got = append(got, i)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("digits %d: %q: pieces end at %v, the pattern's at %v", tc.digits, s, got, want)
			}
		}
	}
}

// TestLlamaLineBreaks checks Llama-3's split where line breaks and DEL
// are, worked out by hand from the pattern's alternatives (see
// llamaPieceLen).
func TestLlamaLineBreaks(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []string
	}{
		// \s*[\r\n]+ backtracks to the last line break of the run.
		{"\v\r\t\r}", []string{"\v\r\t\r", "}"}},
		{"\r \r}", []string{"\r \r", "}"}},
		// Then the spaces: all but the last before a letter, which leads it.
		{"x\r\n\r\n  y", []string{"x", "\r\n\r\n", " ", " y"}},
		// Punctuation takes the line breaks after it.
		{"f();\n\n\tg", []string{"f", "();\n\n", "\tg"}},
		// DEL is neither space, letter nor number.
		{".. \x7f٣", []string{"..", " \x7f", "٣"}},
		{"a\x7fb", []string{"a", "\x7fb"}},
		// Up to three digits; a space before digits stands alone.
		{"x 12345", []string{"x", " ", "123", "45"}},
		{"I'LL 've", []string{"I", "'LL", " '", "ve"}}, // no contraction after a space
	} {
		var got []string
		for s := []byte(tc.text); len(s) > 0; {
			n := llamaPieceLen(s, 3)
			got = append(got, string(s[:n]))
			s = s[n:]
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: pieces %q, want %q", tc.text, got, tc.want)
		}
	}
}
