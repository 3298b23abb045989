package tokenizer

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/polysketch/polysketch/internal/fifotest"
	tiktoken "github.com/tiktoken-go/tokenizer"
)

// encode is tok's Encode, which must not fail.
func encode(t testing.TB, tok Tokenizer, dst []int32, text []byte) []int32 {
	t.Helper()
	ids, err := tok.Encode(context.Background(), dst, text)
	if err != nil {
		t.Fatalf("%s: Encode(%q): %v", tok.Name(), text, err)
	}
	return ids
}

// mustContinue is Continue, which must not fail.
func mustContinue(t testing.TB, tok Tokenizer, dst []int32, text []byte) []int32 {
	t.Helper()
	ids, err := Continue(context.Background(), tok, dst, text)
	if err != nil {
		t.Fatalf("%s: Continue(%q): %v", tok.Name(), text, err)
	}
	return ids
}

func mustGPT2(t testing.TB) Tokenizer {
	t.Helper()
	g, err := GPT2()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vocab int
	}{{"byte", 256}, {"gpt2", 50257}} {
		tok, err := Lookup(tc.name)
		if err != nil {
			t.Fatalf("Lookup(%q): %v", tc.name, err)
		}
		if tok.Name() != tc.name || tok.VocabSize() != tc.vocab {
			t.Errorf("Lookup(%q) = %s with vocabulary %d, want %s with %d", tc.name, tok.Name(), tok.VocabSize(), tc.name, tc.vocab)
		}
	}
	_, err := Lookup("gpt3")
	if err == nil || !strings.Contains(err.Error(), `"gpt3"`) || !strings.Contains(err.Error(), "byte, gpt2") {
		t.Errorf(`Lookup("gpt3") error = %v, want one naming it and the known tokenizers`, err)
	}
}

// TestGPT2KnownIDs checks ids from GPT-2's published vocabulary
// (encoder.json).
func TestGPT2KnownIDs(t *testing.T) {
	g := mustGPT2(t)
	for _, tc := range []struct {
		text string
		want []int32
	}{
		{"Hello world", []int32{15496, 995}},
		{" the", []int32{262}},
		{"!", []int32{0}},
		{"a\nb", []int32{64, 198, 65}},
		{"\n\n", []int32{628}},
		{" ", []int32{220}},
		{"", nil},
	} {
		if got := encode(t, g, nil, []byte(tc.text)); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	got, err := g.Decode(nil, []int32{50256})
	if err != nil || string(got) != "<|endoftext|>" {
		t.Errorf("Decode([50256]) = %q, %v; want <|endoftext|>", got, err)
	}
}

// eotTokenizer is a tokenizer of another package with an end-of-text
// token: EndOfText finds it by its method.
type eotTokenizer struct{ Tokenizer }

func (eotTokenizer) EndOfText() int32 { return 7 }

func TestEndOfText(t *testing.T) {
	for _, tc := range []struct {
		tok    Tokenizer
		want   int32
		wantOK bool
		text   string // what Decode makes of the token
	}{
		{Byte, 0, false, ""},
		{mustGPT2(t), 50256, true, "<|endoftext|>"}, // GPT-2's encoder.json
		{eotTokenizer{Byte}, 7, true, "\a"},
	} {
		id, ok := EndOfText(tc.tok)
		if id != tc.want || ok != tc.wantOK {
			t.Errorf("EndOfText(%s) = %d, %v; want %d, %v", tc.tok.Name(), id, ok, tc.want, tc.wantOK)
		}
		if !ok {
			continue
		}
		if got, err := tc.tok.Decode(nil, []int32{id}); err != nil || string(got) != tc.text {
			t.Errorf("%s: Decode([%d]) = %q, %v; want %q", tc.tok.Name(), id, got, err, tc.text)
		}
	}
}

// TestGPT2EndOfTextInModule checks the constant against the module's
// vocabulary: the module has byte-pair tokens 0 to 50255 and no token
// 50256, which r50k_base keeps for "<|endoftext|>", and it encodes that
// text as ordinary text, as GPT2 does.
func TestGPT2EndOfTextInModule(t *testing.T) {
	codec, err := tiktoken.Get(tiktoken.R50kBase)
	if err != nil {
		t.Fatal(err)
	}
	g := mustGPT2(t)
	eot, _ := EndOfText(g)
	if eot != int32(g.VocabSize()-1) {
		t.Errorf("end-of-text token %d is not the last of the vocabulary of %d", eot, g.VocabSize())
	}
	if s, err := codec.Decode([]uint{uint(eot) - 1}); err != nil || s == "" {
		t.Errorf("module: token %d = %q, %v; want a byte-pair token", eot-1, s, err)
	}
	if s, err := codec.Decode([]uint{uint(eot)}); err == nil {
		t.Errorf("module decodes token %d to %q; want no byte-pair token there", eot, s)
	}
	text := "a<|endoftext|>b"
	got, want := encode(t, g, nil, []byte(text)), moduleEncode(t, text)
	if !slices.Equal(got, want) || slices.Contains(got, eot) {
		t.Errorf("Encode(%q) = %v, module %v; want the same, without %d", text, got, want, eot)
	}
}

// gpt2ByteOrder returns the ids of the 256 single-byte tokens of GPT-2 as
// its published bytes_to_unicode orders them: the printable bytes '!'..'~',
// '¡'..'¬', '®'..'ÿ' first, then the other bytes in increasing order.
func gpt2ByteOrder() [256]int32 {
	var id [256]int32
	printable := func(b int) bool { return b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae }
	next := int32(0)
	for b := range 256 {
		if printable(b) {
			id[b] = next
			next++
		}
	}
	for b := range 256 {
		if !printable(b) {
			id[b] = next
			next++
		}
	}
	return id
}

func TestGPT2SingleBytes(t *testing.T) {
	g := mustGPT2(t)
	want := gpt2ByteOrder()
	for b := range 256 {
		// Bytes from 0x80 up are invalid UTF-8 on their own.
		got := encode(t, g, nil, []byte{byte(b)})
		if len(got) != 1 || got[0] != want[b] {
			t.Errorf("Encode(%#02x) = %v, want [%d]", b, got, want[b])
		}
	}
}

func TestInvalidUTF8AndDEL(t *testing.T) {
	g := mustGPT2(t)
	ids := gpt2ByteOrder()
	for _, tc := range []struct {
		text string
		want []int32
	}{
		// Each invalid byte is its own token; valid text around it is
		// encoded as if the input ended or started there.
		{"a\x80b", []int32{64, ids[0x80], 65}},
		{"Hello\xff world", []int32{15496, ids[0xff], 995}},
		{"\xe2\x82", []int32{ids[0xe2], ids[0x82]}},                // a truncated '€'
		{"\xed\xa0\x80", []int32{ids[0xed], ids[0xa0], ids[0x80]}}, // a UTF-16 surrogate
		// DEL, which the module drops, is kept: GPT-2 has no merges
		// with it.
		{"\x1f\x7f", []int32{ids[0x1f], ids[0x7f]}},
		{" \x7f,\x7f\x7fHello", []int32{220, ids[0x7f], 11, ids[0x7f], ids[0x7f], 15496}},
		// Pieces "a", " ", " \x7f", "b": the space before DEL leads it.
		{"a  \x7fb", []int32{64, 220, 220, ids[0x7f], 65}},
	} {
		if got := encode(t, g, nil, []byte(tc.text)); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

var texts = []string{
	"",
	"Hello world",
	"package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n",
	"I'm sure they'll say it's what we've done, 'tis he'd",
	"CAN'T WON'T 'S 'Re 're",
	"  leading and trailing  \n\n\t \n",
	"a \u00a0b\u3000c\u0085d\u2028e",
	"numbers 1234567890 ١٢٣ ½ Ⅻ x²",
	"日本語のテキスト、中文文本。한국어",
	"emoji 👋🏽 family 👨‍👩‍👧 flags 🇫🇷",
	"combining é = e\u0301, ñ, Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇",
	"RTL العربية עברית",
	"\x00\x01\x1c\x1f\x7f control",
	"<|endoftext|> is plain text here",
	strings.Repeat("x", 5000) + strings.Repeat(" ", 3000) + strings.Repeat("7", 200),
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for _, tok := range []Tokenizer{Byte, mustGPT2(t)} {
		inputs := make([][]byte, 0, len(texts)+60)
		for _, s := range texts {
			inputs = append(inputs, []byte(s))
		}
		for n := range 50 {
			inputs = append(inputs, random(n*7))
		}
		inputs = append(inputs, random(1<<16))
		for _, in := range inputs {
			ids := encode(t, tok, nil, in)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("%s: Encode(%q) has id %d outside [0, %d)", tok.Name(), in, id, tok.VocabSize())
				}
			}
			out, err := tok.Decode(nil, ids)
			if err != nil {
				t.Fatalf("%s: Decode: %v", tok.Name(), err)
			}
			if !bytes.Equal(out, in) {
				t.Errorf("%s: Decode(Encode(%q)) = %q", tok.Name(), in, out)
			}
		}
	}
}

func TestEncodeAppends(t *testing.T) {
	for _, tok := range []Tokenizer{Byte, mustGPT2(t)} {
		dst := []int32{7, 8}
		got := encode(t, tok, dst, []byte("Hello world"))
		want := append([]int32{7, 8}, encode(t, tok, nil, []byte("Hello world"))...)
		if !slices.Equal(got, want) {
			t.Errorf("%s: Encode onto [7 8] = %v, want %v", tok.Name(), got, want)
		}
		b, err := tok.Decode([]byte("> "), encode(t, tok, nil, []byte("hi")))
		if err != nil || string(b) != "> hi" {
			t.Errorf("%s: Decode onto \"> \" = %q, %v", tok.Name(), b, err)
		}
	}
}

func TestDecodeInvalidID(t *testing.T) {
	for _, tok := range []Tokenizer{Byte, mustGPT2(t)} {
		for _, id := range []int32{-1, int32(tok.VocabSize()), 1 << 30} {
			out, err := tok.Decode(nil, []int32{int32('h'), id})
			if err == nil {
				t.Errorf("%s: Decode(%d) succeeded", tok.Name(), id)
			} else if !strings.Contains(err.Error(), "outside the vocabulary") {
				t.Errorf("%s: Decode(%d) error = %v", tok.Name(), id, err)
			}
			if len(out) != 1 {
				t.Errorf("%s: Decode before the bad id gave %q, want the first token's byte", tok.Name(), out)
			}
		}
	}
}

// TestClassesMatchPattern checks that the character classes used to split
// text agree with the sets of the module's pattern, for every rune.
func TestClassesMatchPattern(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		want := uint8(other)
		switch {
		case unicode.In(r, unicode.L):
			want = letter
		case unicode.In(r, unicode.N):
			want = number
		case unicode.IsSpace(r):
			want = space
		}
		var buf [utf8.UTFMax]byte
		if !utf8.ValidRune(r) {
			continue
		}
		n := utf8.EncodeRune(buf[:], r)
		if got, size := class(buf[:n]); got != want || size != n {
			t.Fatalf("class(%U) = %d (%d bytes), want %d (%d bytes)", r, got, size, want, n)
		}
	}
}

// moduleEncode is the reference: the module's own encoder on the whole text.
func moduleEncode(t testing.TB, text string) []int32 {
	t.Helper()
	codec, err := tiktoken.Get(tiktoken.R50kBase)
	if err != nil {
		t.Fatal(err)
	}
	ids, _, err := codec.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// TestGPT2MatchesModule checks that splitting and caching give the ids that
// the module's encoder gives for the whole text.
func TestGPT2MatchesModule(t *testing.T) {
	g := mustGPT2(t)
	check := func(name, text string) {
		t.Helper()
		got := encode(t, g, nil, []byte(text))
		want := moduleEncode(t, text)
		if !slices.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Errorf("%s: ids differ from the module's at token %d of %d/%d: got %v, want %v",
				name, i, len(got), len(want), got[i:min(i+5, len(got))], want[i:min(i+5, len(want))])
		}
	}
	// The module drops DEL (see encodePiece), so the texts compared with
	// it leave DEL out; TestInvalidUTF8AndDEL covers DEL.
	for i, s := range texts {
		check(fmt.Sprintf("texts[%d]", i), strings.ReplaceAll(s, "\x7f", ""))
	}

	// Random strings over an alphabet of the characters the pattern
	// treats specially.
	alphabet := []rune(" \t\n\r\u00a0\u3000\u0085'srtvelmdSTabc019١½.,!é\u0301日😀\x1c")
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		r := make([]rune, rng.IntN(40))
		for j := range r {
			r[j] = alphabet[rng.IntN(len(alphabet))]
		}
		check(fmt.Sprintf("random %q", string(r)), string(r))
	}

	// Every valid rune, in runs separated by spaces and newlines.
	var sb strings.Builder
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) || r == del {
			continue
		}
		sb.WriteRune(r)
		switch r % 13 {
		case 0:
			sb.WriteByte(' ')
		case 5:
			sb.WriteString("\n ")
		}
		if sb.Len() > 1<<16 {
			check("runes before "+string(r), sb.String())
			sb.Reset()
		}
	}
	check("last runes", sb.String())

	// Real source code.
	limit := 1 << 20
	if testing.Short() {
		limit = 256 << 10
	}
	check("Go source", string(goSource(t, limit)))
}

// goSource returns up to limit bytes of Go source from the toolchain.
func goSource(t testing.TB, limit int) []byte {
	t.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("go env GOROOT: %v", err)
	}
	root := strings.TrimSpace(string(out))
	var text []byte
	for _, dir := range []string{"fmt", "strconv", "unicode/utf8", "net/http", "encoding/json", "go/parser", "regexp/syntax"} {
		files, _ := filepath.Glob(filepath.Join(root, "src", dir, "*.go"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text = append(text, b...)
			if len(text) >= limit {
				return text[:limit]
			}
		}
	}
	if len(text) == 0 {
		t.Skip("no Go source found")
	}
	return text
}

func TestConcurrentEncode(t *testing.T) {
	g := mustGPT2(t)
	text := goSource(t, 64<<10)
	want := encode(t, g, nil, text)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 3 {
				if got, err := g.Encode(context.Background(), nil, text); err != nil || !slices.Equal(got, want) {
					t.Errorf("concurrent Encode gave different ids (%v)", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestOpenNamedPipe gives Open a named pipe, as the path and as the
// tokenizer.json of a directory: it must refuse it at once, not wait for
// a writer.
func TestOpenNamedPipe(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, FileName)
	fifotest.Make(t, fifo)
	for _, arg := range []string{fifo, dir} {
		done := make(chan error, 1)
		go func() {
			_, err := Open(arg)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "is a named pipe, not a regular file") {
				t.Errorf("Open(%s): %v, want an error saying it is a named pipe", arg, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("Open(%s) has not returned after a minute: it waits on the named pipe", arg)
		}
	}
}
