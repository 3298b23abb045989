package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/dlclark/regexp2/v2"

	"github.com/polysketch/polysketch/internal/regular"
)

// FileName is the name of a Hugging Face tokenizer file, which Open looks
// for in a directory.
const FileName = "tokenizer.json"

// loaded holds the tokenizers parsed in this process by name, for Lookup.
var loaded sync.Map // string → *BPE

// Open returns the tokenizer named by arg: a name Lookup knows ("byte",
// "gpt2", or that of a tokenizer file parsed before), or the path of a
// tokenizer.json or of a directory holding one.
func Open(arg string) (Tokenizer, error) {
	if t, err := Lookup(arg); err == nil {
		return t, nil
	}
	path := arg
	info, err := os.Stat(path)
	if err == nil && info.IsDir() {
		path = filepath.Join(path, FileName)
	}
	b, err := regular.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !strings.ContainsAny(arg, `/\.`):
		return nil, fmt.Errorf("unknown tokenizer %q: choose %s, or give a tokenizer.json or a directory holding one", arg, strings.Join(Names(), ", "))
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("tokenizer %s does not exist: give a tokenizer.json, a directory holding one, or one of %s", path, strings.Join(Names(), ", "))
	case err != nil:
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

// Name of a tokenizer parsed from a file: "bpe-" and the start of the
// file's SHA-256, so that the name changes when the file does.
func fileName(b []byte) string {
	sum := sha256.Sum256(b)
	return fmt.Sprintf("bpe-%x", sum[:8])
}

// The parts of tokenizer.json that polysketch reads.
type fileJSON struct {
	AddedTokens   []addedJSON     `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *modelJSON      `json:"model"`
}

type addedJSON struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Special    bool   `json:"special"`
	Normalized *bool  `json:"normalized"`
}

type modelJSON struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

type typed struct {
	Type string `json:"type"`
}

// preJSON is any pre-tokenizer; the fields of the types polysketch
// reads.
type preJSON struct {
	Type           string            `json:"type"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	Pattern        struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
	// IndividualDigits is Digits': each digit a piece, not each run.
	IndividualDigits bool `json:"individual_digits"`
}

// Parse reads a Hugging Face tokenizer.json holding a byte-level BPE model:
// a ByteLevel pre-tokenizer, alone or after Split steps, with merges as
// "a b" strings or ["a", "b"] pairs, and added tokens. Other models
// (WordPiece, Unigram...), pre-tokenizers and normalizers are refused, as
// are files without a token for every byte. The tokenizer is known to
// Lookup by its name from then on.
func Parse(b []byte) (*BPE, error) {
	t, err := parse(b)
	if err != nil {
		return nil, err
	}
	if old, ok := loaded.LoadOrStore(t.name, t); ok {
		return old.(*BPE), nil
	}
	return t, nil
}

func parse(b []byte) (*BPE, error) {
	var f fileJSON
	if err := json.Unmarshal(b, &f); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || strings.Contains(err.Error(), "unexpected end of JSON input") {
			return nil, fmt.Errorf("not a tokenizer.json: truncated or not JSON (%v)", err)
		}
		return nil, fmt.Errorf("not a tokenizer.json: %v", err)
	}
	m := f.Model
	switch {
	case m == nil:
		return nil, errors.New("not a tokenizer.json: no model")
	case m.Type == "" && m.Merges == nil:
		return nil, errors.New("model has no type and no merges: only BPE models are supported")
	case m.Type != "" && m.Type != "BPE":
		return nil, fmt.Errorf("model type %s is not supported: polysketch reads byte-level BPE models only", m.Type)
	case m.Dropout != nil && *m.Dropout > 0:
		return nil, fmt.Errorf("BPE dropout %v is not supported: set it to null", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "",
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, errors.New("BPE with a continuing_subword_prefix or end_of_word_suffix is not supported: polysketch reads byte-level BPE models only")
	}
	t := &BPE{name: fileName(b), file: b, ignoreMerges: m.IgnoreMerges, eot: -1}
	if m.ByteFallback {
		if err := t.readPiece(&f); err != nil {
			return nil, err
		}
	} else if err := t.readByteLevel(&f); err != nil {
		return nil, err
	}
	if err := t.readMerges(m.Merges, m.Vocab); err != nil {
		return nil, err
	}
	if err := t.readAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	if err := t.readPost(f.PostProcessor); err != nil {
		return nil, err
	}
	t.caches.New = func() any { return &bpeCache{pieces: newPieceCache()} }
	return t, nil
}

// readByteLevel reads the normalizer, pre-tokenizer, decoder and
// vocabulary of a byte-level file.
func (t *BPE) readByteLevel(f *fileJSON) error {
	m := f.Model
	if err := t.readNormalizer(f.Normalizer); err != nil {
		return err
	}
	byteLevel, err := t.readPre(f.PreTokenizer)
	if err != nil {
		return err
	}
	if !byteLevel {
		return errors.New("pre-tokenizer has no ByteLevel step: polysketch reads byte-level BPE models, and BPE models with byte_fallback")
	}
	if len(f.Decoder) > 0 && string(f.Decoder) != "null" {
		var d typed
		if err := json.Unmarshal(f.Decoder, &d); err != nil {
			return fmt.Errorf("decoder: %v", err)
		}
		if d.Type != "ByteLevel" {
			return fmt.Errorf("decoder type %s is not supported with a ByteLevel pre-tokenizer", d.Type)
		}
	}
	if err := t.sizeTokens(f); err != nil {
		return err
	}
	t.vocab = make(map[string]int32, len(m.Vocab))
	for s, id := range m.Vocab {
		bs, ok := fromByteLevel(s)
		if !ok {
			// Not byte-level: unreachable by merges; decodes as written.
			bs = []byte(s)
		} else {
			t.vocab[string(bs)] = id
		}
		t.tokens[id] = bs
	}
	for b := range t.byteID {
		id, ok := m.Vocab[string(byteRune[b])]
		if !ok {
			return fmt.Errorf("vocabulary has no token for the byte %#02x: polysketch reads byte-level BPE models only", b)
		}
		t.byteID[b] = id
	}
	return nil
}

// sizeTokens makes t.tokens as long as the largest id of the vocabulary
// and added tokens needs, and checks that the vocabulary gives each id
// once.
func (t *BPE) sizeTokens(f *fileJSON) error {
	m := f.Model
	size := int32(0)
	for _, id := range m.Vocab {
		size = max(size, id+1)
	}
	for _, a := range f.AddedTokens {
		size = max(size, a.ID+1)
	}
	if n := len(m.Vocab) + len(f.AddedTokens); int(size) > 2*n+1024 {
		return fmt.Errorf("token id %d is far beyond the file's %d tokens: the ids must number the tokens from 0", size-1, n)
	}
	t.tokens = make([][]byte, size)
	seen := make([]bool, size)
	for s, id := range m.Vocab {
		if id < 0 {
			return fmt.Errorf("vocabulary: token %q has negative id %d", s, id)
		}
		if seen[id] {
			return fmt.Errorf("vocabulary: id %d is given to two tokens", id)
		}
		seen[id] = true
	}
	return nil
}

func (t *BPE) readNormalizer(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("normalizer: %v", err)
	}
	switch n.Type {
	case "NFC":
		t.nfc = true
	case "Sequence":
		for _, s := range n.Normalizers {
			if err := t.readNormalizer(s); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("normalizer type %s is not supported: polysketch reads none, NFC, or a Sequence of NFC", n.Type)
	}
	return nil
}

// readPre reads the pre-tokenizer into t.steps and reports whether it has
// a ByteLevel step.
func (t *BPE) readPre(raw json.RawMessage) (byteLevel bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	var p preJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return false, fmt.Errorf("pre_tokenizer: %v", err)
	}
	switch p.Type {
	case "ByteLevel":
		if p.AddPrefixSpace {
			t.steps = append(t.steps, step{kind: prefixSpace})
		}
		if p.UseRegex == nil || *p.UseRegex {
			t.steps = append(t.steps, step{kind: splitGPT2})
		}
		return true, nil
	case "Sequence":
		for _, s := range p.Pretokenizers {
			bl, err := t.readPre(s)
			if err != nil {
				return false, err
			}
			byteLevel = byteLevel || bl
		}
		return byteLevel, nil
	case "Digits":
		t.steps = append(t.steps, step{kind: splitDigits, individual: p.IndividualDigits})
		return false, nil
	case "Split":
		st := step{invert: p.Invert}
		switch p.Behavior {
		case "Isolated":
		case "Removed":
			st.removed = true
		default:
			return false, fmt.Errorf("pre-tokenizer Split with behavior %s is not supported: polysketch reads Isolated and Removed", p.Behavior)
		}
		switch {
		case p.Pattern.Regex != nil && (*p.Pattern.Regex == llama3Split || *p.Pattern.Regex == qwen2Split) && !p.Invert && !st.removed:
			st.kind, st.digits = splitLlama, 3
			if *p.Pattern.Regex == qwen2Split {
				st.digits = 1
			}
		case p.Pattern.Regex != nil:
			re, err := regexp2.Compile(*p.Pattern.Regex, regexp2.None)
			if err != nil {
				return false, fmt.Errorf("pre-tokenizer Split: pattern %q: %v", *p.Pattern.Regex, err)
			}
			re.MatchTimeout = MatchTimeout
			st.kind, st.re = splitRegex, re
		case p.Pattern.String != nil:
			st.kind, st.literal = splitLiteral, *p.Pattern.String
		default:
			return false, errors.New("pre-tokenizer Split has no pattern")
		}
		t.steps = append(t.steps, st)
		return false, nil
	}
	return false, fmt.Errorf("pre-tokenizer type %s is not supported: polysketch reads ByteLevel, Split, Digits and Sequence", p.Type)
}

func (t *BPE) readMerges(raw json.RawMessage, vocab map[string]int32) error {
	var pairs [][2]string
	var strs []string
	if len(raw) > 0 && json.Unmarshal(raw, &strs) == nil {
		for i, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return fmt.Errorf("merge %d %q: want two tokens separated by a space", i, s)
			}
			pairs = append(pairs, [2]string{a, b})
		}
	} else if err := json.Unmarshal(raw, &pairs); err != nil {
		return fmt.Errorf("merges: want \"a b\" strings or [\"a\", \"b\"] pairs: %v", err)
	}
	t.merges = make(map[uint64]merge, len(pairs))
	for i, p := range pairs {
		a, okA := vocab[p[0]]
		b, okB := vocab[p[1]]
		id, okID := vocab[p[0]+p[1]]
		if !okA || !okB || !okID {
			return fmt.Errorf("merge %d %q: a token or what it merges into is not in the vocabulary", i, p[0]+" "+p[1])
		}
		if _, dup := t.merges[pairKey(a, b)]; !dup {
			t.merges[pairKey(a, b)] = merge{int32(i), id}
		}
	}
	return nil
}

var eotNames = []string{"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"}

func (t *BPE) readAdded(added []addedJSON) error {
	for _, a := range added {
		switch {
		case a.ID < 0:
			return fmt.Errorf("added token %q has negative id %d", a.Content, a.ID)
		case a.Content == "":
			return fmt.Errorf("added token %d is empty", a.ID)
		case a.SingleWord:
			return fmt.Errorf("added token %q has single_word true, which polysketch does not support", a.Content)
		case t.tokens[a.ID] != nil && !bytes.Equal(t.tokens[a.ID], []byte(a.Content)):
			// Decode would give one of the two for both: the text would not
			// come back.
			return fmt.Errorf("added token %q has the id %d of the token %q: give it an id of its own", a.Content, a.ID, t.tokens[a.ID])
		case t.piece != nil && t.piece.norm != nil && (a.Normalized == nil && !a.Special || a.Normalized != nil && *a.Normalized):
			// Hugging Face's libraries look for it in the normalized text,
			// where a Prepend or Replace has changed it.
			return fmt.Errorf("added token %q has normalized true, which polysketch does not support with byte_fallback", a.Content)
		}
		t.tokens[a.ID] = []byte(a.Content)
		t.added = append(t.added, addedToken{content: []byte(a.Content), id: a.ID, lstrip: a.LStrip, rstrip: a.RStrip, special: a.Special})
	}
	for k, a := range t.added {
		t.addedByFirst[a.content[0]] = append(t.addedByFirst[a.content[0]], k)
	}
	for _, ks := range t.addedByFirst {
		slices.SortStableFunc(ks, func(i, j int) int { return len(t.added[j].content) - len(t.added[i].content) })
	}
	for _, name := range eotNames {
		for _, a := range t.added {
			if a.special && string(a.content) == name && !t.hasEOT {
				t.eot, t.hasEOT = a.id, true
			}
		}
	}
	return nil
}

// hasEndOfText lets EndOfText see that a BPE may have no end-of-text
// token.
func (t *BPE) hasEndOfText() bool { return t.hasEOT }

// quote writes s as a JSON string, leaving <, > and & as they are, as
// Hugging Face's files do.
func quote(buf *bytes.Buffer, s string) {
	e := json.NewEncoder(buf)
	e.SetEscapeHTML(false)
	e.Encode(s)
	buf.Truncate(buf.Len() - 1) // the newline Encode adds
}

// readPost reads the ids that the post-processor puts around one text:
// TemplateProcessing's special tokens before and after $A (Llama's <s>),
// RobertaProcessing's and BertProcessing's cls and sep; ByteLevel puts
// none.
func (t *BPE) readPost(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var p struct {
		Type          string                       `json:"type"`
		Processors    []json.RawMessage            `json:"processors"`
		Single        []map[string]json.RawMessage `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
		Cls []any `json:"cls"`
		Sep []any `json:"sep"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("post_processor: %v", err)
	}
	check := func(id int32) error {
		if id < 0 || int(id) >= len(t.tokens) || t.tokens[id] == nil {
			return fmt.Errorf("post-processor %s: token id %d is no token of the vocabulary", p.Type, id)
		}
		return nil
	}
	switch p.Type {
	case "ByteLevel":
	case "Sequence":
		for _, q := range p.Processors {
			if err := t.readPost(q); err != nil {
				return err
			}
		}
	case "TemplateProcessing":
		seen := false // $A
		for _, item := range p.Single {
			var seq struct {
				ID string `json:"id"`
			}
			if r, ok := item["Sequence"]; ok {
				if err := json.Unmarshal(r, &seq); err != nil || seq.ID != "A" {
					return fmt.Errorf("post-processor TemplateProcessing: single holds the sequence %s: want $A only", r)
				}
				seen = true
				continue
			}
			r, ok := item["SpecialToken"]
			if !ok || json.Unmarshal(r, &seq) != nil {
				return fmt.Errorf("post-processor TemplateProcessing: single holds an item that is neither a SpecialToken nor a Sequence")
			}
			s, ok := p.SpecialTokens[seq.ID]
			if !ok {
				return fmt.Errorf("post-processor TemplateProcessing: special token %q is not in its special_tokens", seq.ID)
			}
			for _, id := range s.IDs {
				if err := check(id); err != nil {
					return err
				}
			}
			if seen {
				t.end = append(t.end, s.IDs...)
			} else {
				t.begin = append(t.begin, s.IDs...)
			}
		}
	case "RobertaProcessing", "BertProcessing":
		for _, pair := range []struct {
			v   []any
			dst *[]int32
		}{{p.Cls, &t.begin}, {p.Sep, &t.end}} {
			if len(pair.v) != 2 {
				return fmt.Errorf("post-processor %s: cls and sep must be [token, id] pairs", p.Type)
			}
			id, ok := pair.v[1].(float64)
			if !ok || id != float64(int32(id)) {
				return fmt.Errorf("post-processor %s: cls and sep must be [token, id] pairs", p.Type)
			}
			if err := check(int32(id)); err != nil {
				return err
			}
			*pair.dst = append(*pair.dst, int32(id))
		}
	default:
		return fmt.Errorf("post-processor type %s is not supported: polysketch reads TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing and Sequence", p.Type)
	}
	return nil
}
