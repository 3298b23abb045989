package tokenizer

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// pieceJSON returns testdata/piece.json, edited by edit if not nil.
func pieceJSON(t testing.TB, edit func(f map[string]any)) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/piece.json")
	if err != nil {
		t.Fatal(err)
	}
	if edit == nil {
		return b
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	edit(f)
	if b, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPieceKnownIDs checks encodings of the SentencePiece kind worked out
// by hand from piece.json's vocabulary: the "▁" put before the text, byte
// tokens for characters outside the vocabulary (a line break, an emoji),
// and the merges of a word.
func TestPieceKnownIDs(t *testing.T) {
	tok, err := Parse(pieceJSON(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Model struct{ Vocab map[string]int32 } `json:"model"`
	}
	json.Unmarshal(pieceJSON(t, nil), &f)
	v := func(s string) int32 {
		id, ok := f.Model.Vocab[s]
		if !ok {
			t.Fatalf("piece.json has no token %q", s)
		}
		return id
	}
	for _, tc := range []struct {
		text string
		want []int32
	}{
		{"\n", []int32{v("▁"), v("<0x0A>")}},
		{"😀", []int32{v("▁"), v("<0xF0>"), v("<0x9F>"), v("<0x98>"), v("<0x80>")}},
		{" return", []int32{v("▁▁"), v("return")}}, // "▁ ▁" is the 7th merge
		{"return\n", []int32{v("▁return"), v("<0x0A>")}},
		{"<s>return", []int32{1, v("▁return")}},
		{"\xff", []int32{v("▁"), v("<0xFF>")}},
	} {
		if got := encode(t, tok, nil, []byte(tc.text)); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	if got := mustContinue(t, tok, nil, []byte(" return")); !slices.Equal(got, []int32{v("▁return")}) {
		t.Errorf("Continue(\" return\") = %v, want [%d] (no \"▁\" put before it)", got, v("▁return"))
	}
	if before, after := tok.Wrap(); !slices.Equal(before, []int32{1}) || len(after) != 0 {
		t.Errorf("Wrap() = %v, %v, want [1] (<s>) and none", before, after)
	}
}

// TestPieceRoundTrip checks that Text gives back any text, invalid UTF-8
// included, that holds no added token and no "▁" (which decodes as a
// space, in Hugging Face's libraries too), and that Decode gives it with
// the space that Encode put before it.
func TestPieceRoundTrip(t *testing.T) {
	tok, err := Parse(pieceJSON(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	pieces := []string{"a", "Z", " ", "  ", "\n", "\t", "é", "世", "😀", "func", "return", "\xff", "\xe4\xb8", "\x00"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		var b []byte
		for range r.IntN(20) {
			b = append(b, pieces[r.IntN(len(pieces))]...)
		}
		ids := encode(t, tok, nil, b)
		text, err := tok.Text(nil, ids)
		if err != nil || !bytes.Equal(text, b) {
			t.Fatalf("Text(Encode(%q)) = %q, %v", b, text, err)
		}
		raw, _ := tok.Decode(nil, ids)
		if want := " " + string(b); len(b) > 0 && string(raw) != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", b, raw, want)
		}
	}
}

// TestPieceParseErrors checks the files of the SentencePiece kind that
// polysketch refuses, in one line that says why.
func TestPieceParseErrors(t *testing.T) {
	model := func(f map[string]any) map[string]any { return f["model"].(map[string]any) }
	for _, tc := range []struct {
		name string
		edit func(f map[string]any)
		want string
	}{
		{"missing byte", func(f map[string]any) { delete(model(f)["vocab"].(map[string]any), "<0x41>") }, "no byte token <0x41>"},
		{"Metaspace split", func(f map[string]any) {
			f["normalizer"] = nil
			f["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}
		}, "split true is not supported"},
		{"regex Replace", func(f map[string]any) {
			f["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": " +"}, "content": "▁"}
		}, "only a non-empty String pattern"},
		{"normalized added token", func(f map[string]any) {
			f["added_tokens"] = append(f["added_tokens"].([]any), map[string]any{"id": 793, "content": "<x>", "normalized": true}) // an id of its own
		}, `added token "<x>" has normalized true`},
		{"Strip at the end", func(f map[string]any) {
			f["decoder"].(map[string]any)["decoders"].([]any)[3].(map[string]any)["stop"] = 1
		}, "Strip of \" \", start 1, stop 1, is not supported"},
		{"post-processor", func(f map[string]any) { f["post_processor"] = map[string]any{"type": "Whatever"} }, "post-processor type Whatever is not supported"},
		{"template token", func(f map[string]any) {
			f["post_processor"].(map[string]any)["special_tokens"] = map[string]any{}
		}, `special token "<s>" is not in its special_tokens`},
	} {
		_, err := Parse(pieceJSON(t, tc.edit))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Parse error = %v, want one line containing %q", tc.name, err, tc.want)
		}
	}
}

// TestDigits checks the Digits pre-tokenizer (SmolLM2's, before
// ByteLevel): every character of Unicode's N is a piece of its own, as
// the Rust library's char::is_numeric makes it, "٣" and "½" included.
func TestDigits(t *testing.T) {
	base := mustTrain(t, countText(nil, "x 123 ab12 x٣½"), TrainOptions{VocabSize: 300})
	var f map[string]any
	json.Unmarshal(base.JSON(), &f)
	f["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Digits", "individual_digits": true},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
	}}
	b, _ := json.Marshal(f)
	tok, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(pieces ...string) []int32 {
		var ids []int32
		for _, p := range pieces {
			ids = encode(t, base, ids, []byte(p))
		}
		return ids
	}
	for _, tc := range []struct {
		text   string
		pieces []string
	}{
		{"x 123", []string{"x", " ", "1", "2", "3"}},
		{"ab12 x", []string{"ab", "1", "2", " x"}},
		{"x٣½", []string{"x", "٣", "½"}},
	} {
		if got, want := encode(t, tok, nil, []byte(tc.text)), enc(tc.pieces...); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v, the pieces %q", tc.text, got, want, tc.pieces)
		}
	}
}
