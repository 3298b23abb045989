package tokenizer

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// BPE is a byte-level byte-pair encoding read from a Hugging Face
// tokenizer.json (see [Parse]): a file that [Train] wrote, GPT-2's, or a
// Llama-3 or Qwen2 style one with a regular-expression split. It encodes
// as Hugging Face's tokenizers do with add_special_tokens false: added
// tokens are found in the text first (leftmost, then longest), the text
// between them is normalized (NFC, if the file says so), split into pieces
// by the file's pre-tokenizer, and each piece, as bytes, is merged by the
// file's ranked merges.
//
// Two departures keep any bytes round-tripping, Decode(Encode(b)) == b:
// each byte of invalid UTF-8, which Hugging Face's tokenizers cannot take,
// becomes the token of that byte, the valid text on either side being
// encoded as if the input ended or started there; and a post-processor's
// beginning- and end-of-sequence tokens are never added (polysketch puts
// [EndOfText] between documents itself). Normalization is the one way text
// can come back different: a file with an NFC normalizer returns NFC.
type BPE struct {
	name string
	file []byte // the tokenizer.json, as read

	tokens [][]byte // the bytes of each id; nil for an id with no token
	byteID [256]int32
	merges map[uint64]merge // by the pair's ids, see pairKey
	vocab  map[string]int32 // the model's tokens by their bytes, for ignoreMerges

	// ignoreMerges takes a piece that is a token as that token without
	// merging (Llama-3).
	ignoreMerges bool
	nfc          bool
	steps        []step
	// piece is set for a file of the SentencePiece kind (see piece), whose
	// vocabulary and merges are of characters, not bytes, and whose
	// byteID holds the byte tokens <0x00> to <0xFF>.
	piece *piece

	// begin and end are the ids the post-processor puts around a text
	// (Hugging Face's add_special_tokens): Llama's <s> before it.
	begin, end []int32

	added        []addedToken
	addedByFirst [256][]int // indices into added by first byte, longest first

	eot    int32
	hasEOT bool

	caches sync.Pool // *bpeCache
}

// merge is what a pair of tokens merges into, and the merge's rank:
// lower ranks merge first.
type merge struct{ rank, id int32 }

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

type addedToken struct {
	content        []byte
	id             int32
	lstrip, rstrip bool
	special        bool
}

// A step is one stage of pre-tokenization: it cuts each piece into
// smaller ones.
type step struct {
	kind    stepKind
	re      *regexp2.Regexp // for splitRegex
	literal string          // for splitLiteral
	digits  int             // for splitLlama: the most digits in a piece
	removed bool            // matches are dropped rather than kept as pieces
	invert  bool            // the pattern matches the text between pieces
	// individual is set for splitDigits that makes each digit a piece,
	// rather than each run of digits.
	individual bool
}

type stepKind uint8

const (
	splitGPT2    stepKind = iota // GPT-2's pattern, by pieceLen
	splitLlama                   // Llama-3's or Qwen2's pattern, by llamaPieceLen
	splitRegex                   // Split with a regular expression
	splitLiteral                 // Split with a string
	splitDigits                  // Digits: numbers (Unicode's N) apart from the rest
	prefixSpace                  // ByteLevel's add_prefix_space
)

type bpeCache struct {
	pieces *pieceCache
	syms   []symbol
	heap   []candidate
	runes  []rune
	offs   []int
}

// symbol is a token of a piece being merged, in a linked list.
type symbol struct {
	id         int32 // -1 once merged into the symbol before it
	prev, next int32
}

// candidate is a merge possible at a position of a piece.
type candidate struct {
	rank, pos, id int32
}

func (t *BPE) Name() string { return t.name }

// VocabSize is one more than the largest id of the model's vocabulary and
// added tokens.
func (t *BPE) VocabSize() int { return len(t.tokens) }

// EndOfText returns the id of the file's end-of-document token, if it has
// one (see [EndOfText]): the first added special token among
// <|endoftext|>, <|end_of_text|>, </s> and <eos>.
func (t *BPE) EndOfText() int32 { return t.eot }

// JSON returns the tokenizer.json t was parsed from, unchanged.
func (t *BPE) JSON() []byte { return t.file }

// Special returns the contents of the added special tokens, by id.
func (t *BPE) Special() map[int32]string {
	m := make(map[int32]string)
	for _, a := range t.added {
		if a.special {
			m[a.id] = string(a.content)
		}
	}
	return m
}

// Wrap returns the ids that t's post-processor puts before and after a
// text when Hugging Face's libraries encode it with add_special_tokens
// (their default): Llama's <s> before it; for most files none. Encode
// never adds them.
func (t *BPE) Wrap() (before, after []int32) { return t.begin, t.end }

// Text appends the text of tokens that start a text, as Hugging Face's
// libraries decode them (special tokens kept): Decode's bytes, less the
// space that the decoder of a SentencePiece-kind file strips from the
// start (the one Encode put there).
func (t *BPE) Text(dst []byte, tokens []int32) ([]byte, error) {
	n := len(dst)
	dst, err := t.Decode(dst, tokens)
	if err != nil {
		return dst, err
	}
	cut := t.textStart(dst[n:])
	return append(dst[:n], dst[n+cut:]...), nil
}

func (t *BPE) Decode(dst []byte, tokens []int32) ([]byte, error) {
	for _, id := range tokens {
		if uint32(id) >= uint32(len(t.tokens)) || t.tokens[id] == nil {
			return dst, fmt.Errorf("%s tokenizer: token id %d is no token of the vocabulary of %d", t.name, id, len(t.tokens))
		}
		dst = append(dst, t.tokens[id]...)
	}
	return dst, nil
}

// Encode fails only if a regular expression of the pre-tokenizer takes
// longer than MatchTimeout over one match (a *PatternError), or ctx is done
// between two of its matches.
func (t *BPE) Encode(ctx context.Context, dst []int32, text []byte) ([]int32, error) {
	return t.encode(ctx, dst, text, atStart)
}

// Continue appends the tokens of text that continues a text already
// encoded, cut where Encode would have made a piece start anyway (before a
// space that follows another character): for a SentencePiece-kind file
// without the "▁" that Encode puts before a text; as Encode for the
// others. It fails as Encode does.
func (t *BPE) Continue(ctx context.Context, dst []int32, text []byte) ([]int32, error) {
	return t.encode(ctx, dst, text, continued)
}

// position is where a section of text, between added tokens, stands.
type position uint8

const (
	atStart    position = iota // it starts the text
	afterAdded                 // it follows an added token
	continued                  // it continues text encoded before
)

func (t *BPE) encode(ctx context.Context, dst []int32, text []byte, pos position) ([]int32, error) {
	c := t.caches.Get().(*bpeCache)
	defer t.caches.Put(c)
	if len(t.added) == 0 {
		return t.encodeText(ctx, dst, text, pos, c)
	}
	start := 0 // of the text not yet encoded
	for i := 0; i < len(text); {
		for i < len(text) && len(t.addedByFirst[text[i]]) == 0 {
			i++
		}
		if i == len(text) {
			break
		}
		a := t.addedAt(text[i:])
		if a == nil {
			i++
			continue
		}
		sec := text[start:i]
		if a.lstrip {
			sec = bytes.TrimRightFunc(sec, unicode.IsSpace)
		}
		var err error
		if dst, err = t.encodeText(ctx, dst, sec, pos, c); err != nil {
			return dst, err
		}
		dst = append(dst, a.id)
		i += len(a.content)
		if a.rstrip {
			rest := bytes.TrimLeftFunc(text[i:], unicode.IsSpace)
			i = len(text) - len(rest)
		}
		start = i
		pos = afterAdded
	}
	return t.encodeText(ctx, dst, text[start:], pos, c)
}

// addedAt returns the longest added token that s starts with, or nil.
func (t *BPE) addedAt(s []byte) *addedToken {
	for _, k := range t.addedByFirst[s[0]] {
		if bytes.HasPrefix(s, t.added[k].content) {
			return &t.added[k]
		}
	}
	return nil
}

// encodeText encodes text that holds no added token, at pos.
func (t *BPE) encodeText(ctx context.Context, dst []int32, text []byte, pos position, c *bpeCache) ([]int32, error) {
	if t.piece != nil {
		return t.encodeSection(dst, text, pos, c), nil
	}
	for len(text) > 0 {
		n := validPrefix(text)
		if n > 0 {
			s := text[:n]
			if t.nfc && !norm.NFC.IsNormal(s) {
				s = norm.NFC.Bytes(s)
			}
			var err error
			if dst, err = t.split(ctx, dst, s, 0, c); err != nil {
				return dst, err
			}
		}
		if n < len(text) {
			dst = append(dst, t.byteID[text[n]])
			n++
		}
		text = text[n:]
	}
	return dst, nil
}

// split applies the pre-tokenization steps from i on to s, valid
// non-empty UTF-8, and encodes the pieces.
func (t *BPE) split(ctx context.Context, dst []int32, s []byte, i int, c *bpeCache) ([]int32, error) {
	if i == len(t.steps) {
		return t.encodePiece(dst, s, c), nil
	}
	var err error
	st := &t.steps[i]
	switch st.kind {
	case splitGPT2:
		for len(s) > 0 && err == nil {
			p := pieceLen(s)
			dst, err = t.split(ctx, dst, s[:p], i+1, c)
			s = s[p:]
		}
	case splitLlama:
		for len(s) > 0 && err == nil {
			p := llamaPieceLen(s, st.digits)
			dst, err = t.split(ctx, dst, s[:p], i+1, c)
			s = s[p:]
		}
	case splitDigits:
		// As the Rust library's Digits, by char::is_numeric (Unicode's
		// N); the JavaScript one takes ASCII digits only.
		for len(s) > 0 && err == nil {
			r, n := utf8.DecodeRune(s)
			p := n
			if num := unicode.IsNumber(r); !num || !st.individual {
				for p < len(s) {
					r, m := utf8.DecodeRune(s[p:])
					if unicode.IsNumber(r) != num {
						break
					}
					p += m
				}
			}
			dst, err = t.split(ctx, dst, s[:p], i+1, c)
			s = s[p:]
		}
	case prefixSpace:
		if s[0] != ' ' {
			s = append([]byte{' '}, s...)
		}
		dst, err = t.split(ctx, dst, s, i+1, c)
	case splitRegex, splitLiteral:
		prev := 0
		emit := func(start, end int, match bool) error {
			if start == end || match != st.invert && st.removed {
				return nil
			}
			var err error
			dst, err = t.split(ctx, dst, s[start:end], i+1, c)
			return err
		}
		err = t.matches(ctx, st, s, c, func(start, end int) error {
			if err := emit(prev, start, false); err != nil {
				return err
			}
			prev = end
			return emit(start, end, true)
		})
		if err == nil {
			err = emit(prev, len(s), false)
		}
	}
	return dst, err
}

// MatchTimeout bounds one match of a regular expression of a
// pre-tokenizer (a Split step of a tokenizer.json). A pattern can
// backtrack catastrophically on some text, taking time exponential in its
// length (`(a+)+$` on a run of a's and a last other character); the
// encoding then fails with a *PatternError instead of holding a core
// forever. GPT-2's pattern takes a megabyte of letters in one match of a
// few milliseconds (BenchmarkLongMatch).
const MatchTimeout = time.Second

// A PatternError is an encoding stopped by a regular expression of the
// pre-tokenizer that took longer than MatchTimeout over one match.
type PatternError struct {
	Pattern string // the regular expression
	Text    string // the start of the text it was matched against
}

func (e *PatternError) Error() string {
	return fmt.Sprintf("pre-tokenizer pattern %q took longer than %v over one match of the text %q: it backtracks catastrophically on such text; change the pattern in the tokenizer.json", e.Pattern, MatchTimeout, e.Text)
}

// matches calls f with the byte offsets of each match of st's pattern in
// s, left to right, without overlaps, and stops at f's first error. A
// regular expression's matches are bounded by MatchTimeout each, and
// stop when ctx is done.
func (t *BPE) matches(ctx context.Context, st *step, s []byte, c *bpeCache, f func(start, end int) error) error {
	if st.kind == splitLiteral {
		for off := 0; st.literal != ""; {
			k := bytes.Index(s[off:], []byte(st.literal))
			if k < 0 {
				return nil
			}
			if err := f(off+k, off+k+len(st.literal)); err != nil {
				return err
			}
			off += k + len(st.literal)
		}
		return nil
	}
	// regexp2 matches runes; offs maps rune indices to byte offsets.
	c.runes, c.offs = c.runes[:0], c.offs[:0]
	for i, r := range string(s) {
		c.runes = append(c.runes, r)
		c.offs = append(c.offs, i)
	}
	c.offs = append(c.offs, len(s))
	runes, offs := c.runes, c.offs
	m, err := st.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if err := f(offs[m.RuneIndex], offs[m.RuneIndex+m.RuneLength]); err != nil {
			return err
		}
		if m.RuneLength == 0 && m.RuneIndex == len(runes) {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err = st.re.FindNextMatch(m)
	}
	if err != nil {
		// A timeout: regexp2's error quotes the whole text.
		const show = 40
		text := string(s)
		if len(text) > show {
			text = strings.ToValidUTF8(text[:show], "") + "…"
		}
		return &PatternError{Pattern: st.re.String(), Text: text}
	}
	return nil
}

// encodePiece appends the tokens of one piece of the pre-tokenization.
func (t *BPE) encodePiece(dst []int32, piece []byte, c *bpeCache) []int32 {
	switch len(piece) {
	case 0:
		return dst
	case 1:
		return append(dst, t.byteID[piece[0]])
	}
	if sp, ok := c.pieces.index[string(piece)]; ok {
		return append(dst, c.pieces.ids[sp.off:sp.off+sp.n]...)
	}
	start := len(dst)
	if id, ok := t.vocab[string(piece)]; ok && t.ignoreMerges {
		dst = append(dst, id)
	} else {
		dst = t.merge(dst, piece, c)
	}
	c.pieces.add(piece, dst[start:])
	return dst
}

// merge appends the tokens that merging the bytes of piece gives: the
// possible merge of lowest rank is made, the leftmost of equals first,
// until none is left, as Hugging Face's tokenizers do.
func (t *BPE) merge(dst []int32, piece []byte, c *bpeCache) []int32 {
	syms := c.syms[:0]
	for _, b := range piece {
		syms = append(syms, symbol{id: t.byteID[b]})
	}
	return t.mergeSymbols(dst, syms, c)
}

// mergeSymbols appends the tokens that merging the tokens syms (their ids
// alone set; not empty) gives.
func (t *BPE) mergeSymbols(dst []int32, syms []symbol, c *bpeCache) []int32 {
	for i := range syms {
		syms[i].prev, syms[i].next = int32(i-1), int32(i+1)
	}
	syms[len(syms)-1].next = -1
	h := candidates(c.heap[:0])
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := t.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(candidate{m.rank, int32(i), m.id})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		s := &syms[top.pos]
		if s.id < 0 || s.next < 0 {
			continue
		}
		next := &syms[s.next]
		if m, ok := t.merges[pairKey(s.id, next.id)]; !ok || m.rank != top.rank {
			continue // the pair at top.pos changed since
		}
		s.id, next.id = top.id, -1
		s.next = next.next
		if s.next >= 0 {
			syms[s.next].prev = top.pos
			if m, ok := t.merges[pairKey(s.id, syms[s.next].id)]; ok {
				h.push(candidate{m.rank, top.pos, m.id})
			}
		}
		if s.prev >= 0 {
			if m, ok := t.merges[pairKey(syms[s.prev].id, s.id)]; ok {
				h.push(candidate{m.rank, s.prev, m.id})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	c.syms, c.heap = syms, h
	return dst
}

// candidates is a binary min-heap by rank, then position.
type candidates []candidate

func (a candidate) less(b candidate) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

func (h *candidates) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *candidates) pop() candidate {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && s[l].less(s[m]) {
			m = l
		}
		if r := l + 1; r < n && s[r].less(s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
