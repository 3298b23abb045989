package tokenizer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlclark/regexp2/v2"
)

// countText counts the pieces of texts, each added on its own.
func countText(special []string, texts ...string) *Counts {
	c := NewCounts(special)
	for _, s := range texts {
		c.Add([]byte(s))
	}
	return c
}

func mustTrain(t testing.TB, c *Counts, opt TrainOptions) *BPE {
	t.Helper()
	tok, err := Train(c, opt)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestTrainGolden checks the vocabulary fitted to "abab ab abc", worked
// out by hand.
//
// GPT-2's pattern cuts the text into the pieces "abab", " ab" and " abc"
// (a space leads the letters after it), each once. Their adjacent pairs:
//
//	a b: 2 in "abab", 1 in " ab", 1 in " abc" = 4
//	b a: 1;  ␠ a: 2;  b c: 1
//
// Merge 1 (id 256) is the most frequent pair, a b → "ab". The pieces become
// [ab ab], [␠ ab], [␠ ab c]; pairs: ab ab 1, ␠ ab 2, ab c 1.
// Merge 2 (id 257): ␠ ab → " ab". Pieces: [ab ab], [" ab"], [" ab" c];
// pairs: ab ab 1, " ab" c 1: a tie, which the smaller ids win: (256, 256)
// before (257, 'c'=99).
// Merge 3 (id 258): ab ab → "abab". Merge 4 (id 259): " ab" c → " abc".
// No pair is left. The special token comes last: <|endoftext|> is 260.
//
// Encoding " abab": bytes ␠ a b a b. Possible merges: a b (rank 0) at
// positions 1 and 3; the leftmost goes first: ␠ ab a b; then a b at 3
// again (rank 0): ␠ ab ab; now ␠ ab (rank 1) comes before ab ab (rank 2):
// " ab" ab, and " ab" ab is no merge: [257 256].
func TestTrainGolden(t *testing.T) {
	tok := mustTrain(t, countText(DefaultSpecial, "abab ab abc"), TrainOptions{VocabSize: 300, Special: DefaultSpecial})
	if tok.VocabSize() != 261 {
		t.Fatalf("VocabSize = %d, want 261: 256 bytes, 4 merges, 1 special token", tok.VocabSize())
	}
	for id, want := range map[int32]string{97: "a", 256: "ab", 257: " ab", 258: "abab", 259: " abc", 260: "<|endoftext|>"} {
		if got, err := tok.Decode(nil, []int32{id}); err != nil || string(got) != want {
			t.Errorf("token %d = %q, %v; want %q", id, got, err, want)
		}
	}
	var f struct {
		Model struct {
			Merges []string `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(tok.JSON(), &f); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a b", "Ġ ab", "ab ab", "Ġab c"}; !slices.Equal(f.Model.Merges, want) {
		t.Errorf("merges = %q, want %q", f.Model.Merges, want)
	}
	if id, ok := EndOfText(tok); !ok || id != 260 {
		t.Errorf("EndOfText = %d, %v; want 260, true", id, ok)
	}
	for _, tc := range []struct {
		text string
		want []int32
	}{
		{"abab", []int32{258}},
		{" abc", []int32{259}},
		{"abc", []int32{256, 'c'}},
		{" abab", []int32{257, 256}},
		{"ab<|endoftext|> ab", []int32{256, 260, 257}},
		{"b a", []int32{'b', ' ', 'a'}},
	} {
		if got := encode(t, tok, nil, []byte(tc.text)); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}

	// Three merges wanted: the tie goes to ab ab.
	small := mustTrain(t, countText(nil, "abab ab abc"), TrainOptions{VocabSize: 259})
	if got, _ := small.Decode(nil, []int32{258}); string(got) != "abab" || small.VocabSize() != 259 {
		t.Errorf("with 3 merges: token 258 = %q of %d, want \"abab\" of 259", got, small.VocabSize())
	}
	if _, ok := EndOfText(small); ok {
		t.Error("a tokenizer without special tokens has an end-of-text token")
	}
}

// goText is text to train on: the package's own source.
func goText(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, f := range []string{"bpe.go", "hf.go", "train.go", "gpt2.go", "tokenizer_test.go"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(src)
	}
	return b.Bytes()
}

// TestTrainDeterministic checks that the file depends on the counts alone,
// not on how the text was cut up or counted in parallel.
func TestTrainDeterministic(t *testing.T) {
	text := goText(t)
	opt := TrainOptions{VocabSize: 600, Special: []string{"<|endoftext|>", "<pad>"}}
	whole := mustTrain(t, countText(opt.Special, string(text)), opt)

	// Cut before spaces that follow printable ASCII, as the corpus
	// reader does, and counted by three counters merged in another order.
	cs := []*Counts{NewCounts(opt.Special), NewCounts(opt.Special), NewCounts(opt.Special)}
	rest, k := text, 0
	for len(rest) > 0 {
		cut := len(rest)
		for i := min(len(rest)-1, 997); i > 0; i-- {
			if rest[i] == ' ' && rest[i-1] > ' ' && rest[i-1] < 0x7f {
				cut = i
				break
			}
		}
		cs[k%3].Add(rest[:cut])
		rest, k = rest[cut:], k+1
	}
	cs[2].Merge(cs[0])
	cs[2].Merge(cs[1])
	parts := mustTrain(t, cs[2], opt)
	if !bytes.Equal(whole.JSON(), parts.JSON()) {
		t.Error("the same text counted in parts gives another tokenizer.json")
	}
	if again := mustTrain(t, countText(opt.Special, string(text)), opt); !bytes.Equal(whole.JSON(), again.JSON()) {
		t.Error("training twice gives two tokenizer.json files")
	}
}

// llamaStyle returns the tokenizer.json of tok with a Llama-3 split and
// extra added tokens, as hf.mjs makes it.
func llamaStyle(t testing.TB, tok *BPE, pattern string, normalizer string, added ...string) []byte {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal(tok.JSON(), &f); err != nil {
		t.Fatal(err)
	}
	f["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
	}}
	if normalizer != "" {
		f["normalizer"] = map[string]any{"type": normalizer}
	}
	f["model"].(map[string]any)["ignore_merges"] = true
	list := f["added_tokens"].([]any)
	for i, a := range added {
		list = append(list, map[string]any{"id": tok.VocabSize() + i, "content": a, "special": true})
	}
	f["added_tokens"] = list
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// TestBPERoundTrip checks Decode(Encode(b)) == b for random bytes, invalid
// UTF-8, special tokens and all, with a trained tokenizer and a
// Llama-3-style one.
func TestBPERoundTrip(t *testing.T) {
	trained := mustTrain(t, countText(DefaultSpecial, string(goText(t))), TrainOptions{VocabSize: 800, Special: DefaultSpecial})
	llama, err := Parse(llamaStyle(t, trained, llama3Pattern, "", "<|eot_id|>"))
	if err != nil {
		t.Fatal(err)
	}
	pieces := []string{"a", "Z", " ", "  ", "\n", "\t", "é", "世", "😀", "'s", "'LL", "func", "<|endoftext|>", "<|eot_id|>", "<|", "123", "\xff", "\xe4\xb8", "\x00", "\u0301"}
	r := rand.New(rand.NewPCG(1, 2))
	for _, tok := range []*BPE{trained, llama} {
		for range 2000 {
			var b []byte
			for range r.IntN(30) {
				if r.IntN(4) == 0 {
					b = append(b, byte(r.IntN(256)))
				} else {
					b = append(b, pieces[r.IntN(len(pieces))]...)
				}
			}
			ids := encode(t, tok, nil, b)
			got, err := tok.Decode(nil, ids)
			if err != nil || !bytes.Equal(got, b) {
				t.Fatalf("%s: Decode(Encode(%q)) = %q, %v", tok.Name(), b, got, err)
			}
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("%s: Encode(%q) gave id %d outside [0, %d)", tok.Name(), b, id, tok.VocabSize())
				}
			}
		}
	}
	// The split of Llama-3 differs from GPT-2's: digits go by threes.
	if got := encode(t, llama, nil, []byte("12345")); len(got) < 2 {
		t.Errorf("llama-style Encode(12345) = %v, want \"123\" and \"45\" apart", got)
	}
}

// TestAddedTokens checks that added tokens are found leftmost, then
// longest, and that lstrip and rstrip take the white space beside them.
func TestAddedTokens(t *testing.T) {
	base := mustTrain(t, countText(nil, "hello world"), TrainOptions{VocabSize: 260})
	var f map[string]any
	json.Unmarshal(base.JSON(), &f)
	f["added_tokens"] = []any{
		map[string]any{"id": 260, "content": "<a>", "special": true},
		map[string]any{"id": 261, "content": "<a><b>", "special": true},
		map[string]any{"id": 262, "content": "[S]", "lstrip": true, "rstrip": true},
	}
	b, _ := json.Marshal(f)
	tok, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		want []int32
	}{
		{"<a><b>", []int32{261}},
		{"<a><a><b>", []int32{260, 261}},
		{"x <a>y", []int32{'x', ' ', 260, 'y'}},
		{"x  [S]  y", []int32{'x', 262, 'y'}},
		{"<a", []int32{'<', 'a'}},
	} {
		if got := encode(t, tok, nil, []byte(tc.text)); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

// TestParseErrors checks that files polysketch cannot read are refused in
// one line that says why.
func TestParseErrors(t *testing.T) {
	good := mustTrain(t, countText(nil, "hello world"), TrainOptions{VocabSize: 270}).JSON()
	edit := func(f func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	for _, tc := range []struct {
		name, file, want string
	}{
		{"truncated", string(good[:len(good)/2]), "truncated or not JSON"},
		{"not JSON", "vocab = 1", "truncated or not JSON"},
		{"empty", "", "truncated or not JSON"},
		{"no model", "{}", "no model"},
		{"WordPiece", edit(func(m map[string]any) { model(m)["type"] = "WordPiece" }), "model type WordPiece is not supported"},
		{"Unigram", edit(func(m map[string]any) { model(m)["type"] = "Unigram" }), "model type Unigram is not supported"},
		{"Metaspace", edit(func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }), "pre-tokenizer type Metaspace is not supported"},
		{"Whitespace in a sequence", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "Whitespace"}}}
		}), "pre-tokenizer type Whitespace is not supported"},
		{"no ByteLevel", edit(func(m map[string]any) { m["pre_tokenizer"] = nil }), "no ByteLevel step"},
		{"Lowercase", edit(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} }), "normalizer type Lowercase is not supported"},
		{"decoder", edit(func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} }), "decoder type WordPiece is not supported"},
		{"byte fallback", edit(func(m map[string]any) { model(m)["byte_fallback"] = true }), "byte_fallback"},
		{"missing byte", edit(func(m map[string]any) { delete(model(m)["vocab"].(map[string]any), "Ġ") }), "no token for the byte 0x20"},
		{"bad merge", edit(func(m map[string]any) { model(m)["merges"] = []any{"h zz"} }), `merge 0 "h zz"`},
		{"added token with a vocabulary id", edit(func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"id": model(m)["vocab"].(map[string]any)["h"], "content": "<|x|>", "special": true}}
		}), `added token "<|x|>" has the id`},
		{"two added tokens with one id", edit(func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"id": 300, "content": "<|x|>"}, map[string]any{"id": 300, "content": "<|y|>"}}
		}), `added token "<|y|>" has the id 300 of the token "<|x|>"`},
		{"Split behavior", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "a"}, "behavior": "Contiguous"},
				map[string]any{"type": "ByteLevel", "use_regex": false}}}
		}), "behavior Contiguous is not supported"},
	} {
		_, err := Parse([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Parse error = %v, want one line containing %q", tc.name, err, tc.want)
		}
	}
}

// TestTrainErrors checks the options Train refuses.
func TestTrainErrors(t *testing.T) {
	c := countText(nil, "hello world")
	for _, tc := range []struct {
		opt  TrainOptions
		want string
	}{
		{TrainOptions{VocabSize: 256, Special: DefaultSpecial}, "need at least 257"},
		{TrainOptions{VocabSize: 100}, "need at least 256"},
		{TrainOptions{VocabSize: 300, Special: []string{"<s>", "<s>"}}, "given twice"},
		{TrainOptions{VocabSize: 300, Special: []string{""}}, "empty"},
	} {
		if _, err := Train(c, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Train(%+v) error = %v, want one containing %q", tc.opt, err, tc.want)
		}
	}
}

// TestMergeOrder checks that the merge of lowest rank goes first wherever
// it is, and the leftmost of equal ones: with merges "b c" (rank 0) then
// "a b" (rank 1), "abc" is a bc, not ab c; "abab" is ab ab.
func TestMergeOrder(t *testing.T) {
	tokens := make([][]byte, 256, 258)
	for b := range tokens {
		tokens[b] = []byte{byte(b)}
	}
	tokens = append(tokens, []byte("bc"), []byte("ab"))
	tok, err := Parse(encodeFile(tokens, [][2]int32{{'b', 'c'}, {'a', 'b'}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		want []int32
	}{
		{"abc", []int32{'a', 256}},
		{"abab", []int32{257, 257}},
		{"ababc", []int32{257, 'a', 256}},
		{"bcab", []int32{256, 257}},
	} {
		if got := encode(t, tok, nil, []byte(tc.text)); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

// gpt2File returns GPT-2's tokenizer.json, as Hugging Face publishes it
// (the same vocabulary and merges), made from the ranks of the tiktoken
// module: token r, of rank r, is the merge of the two tokens that merging
// its bytes by the ranks below r ends with.
func gpt2File(t testing.TB) []byte {
	t.Helper()
	g := mustGPT2(t).(*gpt2)
	ranks := make(map[string]int32, gpt2EndOfText)
	tokens := make([][]byte, gpt2EndOfText)
	for id := range int32(gpt2EndOfText) {
		tokens[id] = g.bytes[g.offsets[id]:g.offsets[id+1]]
		ranks[string(tokens[id])] = id
	}
	var merges [][2]int32
	for r := int32(256); r < gpt2EndOfText; r++ {
		parts := make([][]byte, len(tokens[r]))
		for i := range parts {
			parts[i] = tokens[r][i : i+1]
		}
		for len(parts) > 2 {
			best, at := r, -1
			for i := 0; i+1 < len(parts); i++ {
				if k, ok := ranks[string(parts[i])+string(parts[i+1])]; ok && k < best {
					best, at = k, i
				}
			}
			if at < 0 {
				t.Fatalf("token %d %q is no merge of lower-ranked tokens", r, tokens[r])
			}
			parts[at] = tokens[best]
			parts = slices.Delete(parts, at+1, at+2)
		}
		merges = append(merges, [2]int32{ranks[string(parts[0])], ranks[string(parts[1])]})
	}
	return encodeFile(tokens, merges, []string{"<|endoftext|>"})
}

// TestGPT2File checks that GPT-2's tokenizer.json encodes as the built-in
// GPT-2 tokenizer, which the tests compare with the tiktoken module.
func TestGPT2File(t *testing.T) {
	tok, err := Parse(gpt2File(t))
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != gpt2Vocab {
		t.Fatalf("VocabSize = %d, want %d", tok.VocabSize(), gpt2Vocab)
	}
	g := mustGPT2(t)
	// The file's <|endoftext|> is an added token, the built-in's text.
	text := bytes.ReplaceAll(goText(t), []byte("<|endoftext|>"), []byte("<|endoftext>"))
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		i := r.IntN(len(text))
		n := min(r.IntN(400), len(text)-i)
		s := text[i : i+n]
		if want, got := encode(t, g, nil, s), encode(t, tok, nil, s); !slices.Equal(got, want) {
			t.Fatalf("Encode(%q) = %v, the built-in GPT-2 gives %v", s, got, want)
		}
	}
	if got := encode(t, tok, nil, []byte("Hello world<|endoftext|>")); !slices.Equal(got, []int32{15496, 995, 50256}) {
		t.Errorf("Encode(Hello world<|endoftext|>) = %v, want [15496 995 50256]", got)
	}
}

// FuzzParse checks that no file makes Parse panic or a tokenizer it
// accepts fail to round-trip.
func FuzzParse(f *testing.F) {
	good := mustTrain(f, countText(DefaultSpecial, "hello world, hello there"), TrainOptions{VocabSize: 270, Special: DefaultSpecial}).JSON()
	f.Add(good, []byte("hello <|endoftext|> world"))
	f.Add(llamaStyle(f, mustTrain(f, countText(nil, "abc abd"), TrainOptions{VocabSize: 260}), llama3Pattern, "NFC", "<x>"), []byte("a\r\n b"))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":2000000000},"merges":[]}}`), []byte("a"))
	f.Fuzz(func(t *testing.T, file, text []byte) {
		tok, err := parse(file)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error of more than one line: %v", err)
			}
			return
		}
		ids := encode(t, tok, nil, text)
		if _, err := tok.Decode(nil, ids); err != nil {
			t.Errorf("Decode(Encode(%q)): %v", text, err)
		}
	})
}

// withSplits returns the tokenizer.json of tok with a pre-tokenizer of
// regular-expression Split steps, then ByteLevel without its own split.
func withSplits(t testing.TB, tok *BPE, patterns ...string) []byte {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal(tok.JSON(), &f); err != nil {
		t.Fatal(err)
	}
	var steps []any
	for _, p := range patterns {
		steps = append(steps, map[string]any{"type": "Split", "pattern": map[string]any{"Regex": p}, "behavior": "Isolated", "invert": false})
	}
	steps = append(steps, map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false})
	f["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": steps}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPatternBound encodes, with a Split pattern that backtracks
// catastrophically, text on which one match would take longer than the
// universe has left: the encoding must fail with a PatternError, not
// hold its goroutine. (The text is too short for a timeout on a memory
// limit: this is time alone.)
func TestPatternBound(t *testing.T) {
	base := mustTrain(t, countText(nil, "aaaa bbbb"), TrainOptions{VocabSize: 260})
	tok, err := Parse(withSplits(t, base, `(a+)+$`))
	if err != nil {
		t.Fatal(err)
	}
	// Fine on text that matches or fails at once.
	if got := encode(t, tok, nil, []byte("aaaa")); len(got) == 0 {
		t.Fatal("no tokens")
	}
	done := make(chan error, 1)
	go func() {
		_, err := tok.Encode(context.Background(), nil, []byte(strings.Repeat("a", 40)+"!"))
		done <- err
	}()
	select {
	case err := <-done:
		var pe *PatternError
		if !errors.As(err, &pe) || pe.Pattern != `(a+)+$` || !strings.Contains(err.Error(), "backtracks catastrophically") {
			t.Fatalf("Encode: %v, want a PatternError", err)
		}
		if strings.Contains(err.Error(), "\n") || len(err.Error()) > 300 {
			t.Errorf("error %q: want one short line", err)
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("Encode has not returned after 5 minutes: the match is not bounded")
	}
}

// TestEncodeCanceled checks that an encoding with a regular-expression
// split stops between two matches once its context is done.
func TestEncodeCanceled(t *testing.T) {
	base := mustTrain(t, countText(nil, "aaaa bbbb"), TrainOptions{VocabSize: 260})
	tok, err := Parse(withSplits(t, base, `\S+|\s+`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tok.Encode(ctx, nil, []byte("a b c d")); !errors.Is(err, context.Canceled) {
		t.Errorf("Encode with a canceled context: %v, want context.Canceled", err)
	}
}

// TestNestedSplits encodes with two regular-expression Split steps, the
// second splitting the pieces of the first, and checks the pieces against
// those of the second pattern on each piece of the first.
func TestNestedSplits(t *testing.T) {
	base := mustTrain(t, countText(nil, "hello world 123 abc"), TrainOptions{VocabSize: 300})
	two, err := Parse(withSplits(t, base, `\p{L}+|\P{L}+`, `\p{Ll}|\P{Ll}+`))
	if err != nil {
		t.Fatal(err)
	}
	second, err := Parse(withSplits(t, base, `\p{Ll}|\P{Ll}+`))
	if err != nil {
		t.Fatal(err)
	}
	text := "héllo WORLD 123 abc, déjà vu"
	var want []int32
	cuts, err := regexp2.MustCompile(`\p{L}+|\P{L}+`, regexp2.None).FindAllStringIndex(text, -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cuts {
		want = append(want, encode(t, second, nil, []byte(text[c[0]:c[1]]))...)
	}
	if got := encode(t, two, nil, []byte(text)); !slices.Equal(got, want) {
		t.Errorf("Encode(%q) = %v, want %v, the second split's tokens of the first's pieces", text, got, want)
	}
}

// TestAddedTokenOfVocabulary checks that an added token may take the id
// that the vocabulary gives to the same text, as GPT-2's file does for
// <|endoftext|>, and that the text still round-trips.
func TestAddedTokenOfVocabulary(t *testing.T) {
	base := mustTrain(t, countText(nil, "hello world"), TrainOptions{VocabSize: 270})
	var f map[string]any
	json.Unmarshal(base.JSON(), &f)
	id := f["model"].(map[string]any)["vocab"].(map[string]any)["h"]
	f["added_tokens"] = []any{map[string]any{"id": id, "content": "h", "special": false}}
	b, _ := json.Marshal(f)
	tok, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	ids := encode(t, tok, nil, []byte("hello"))
	if text, err := tok.Decode(nil, ids); err != nil || string(text) != "hello" {
		t.Errorf("Decode(Encode(hello)) = %q, %v", text, err)
	}
}
