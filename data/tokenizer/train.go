package tokenizer

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Counts counts the pieces of text as GPT-2's pattern splits it, the
// words a byte-level BPE is trained on. Special tokens in the text are cut
// out first and not counted. A Counts is not safe for concurrent use: give
// each goroutine its own and Merge them.
type Counts struct {
	special [][]byte
	index   map[string]int32 // piece → index into n
	pieces  []string
	n       []int64
	bytes   int64
}

// NewCounts returns an empty Counts that leaves out the special tokens.
func NewCounts(special []string) *Counts {
	c := &Counts{index: make(map[string]int32)}
	for _, s := range special {
		if s != "" {
			c.special = append(c.special, []byte(s))
		}
	}
	return c
}

// Bytes returns the number of bytes of text added.
func (c *Counts) Bytes() int64 { return c.bytes }

// Words returns the number of distinct pieces of two bytes or more
// counted: those a merge can apply to.
func (c *Counts) Words() int { return len(c.pieces) }

// Add counts the pieces of text.
func (c *Counts) Add(text []byte) {
	c.bytes += int64(len(text))
	for len(text) > 0 {
		at, n := len(text), 0
		for _, s := range c.special {
			if i := bytes.Index(text[:min(len(text), at+len(s))], s); i >= 0 && i < at {
				at, n = i, len(s)
			}
		}
		c.addText(text[:at])
		text = text[at+n:]
	}
}

func (c *Counts) addText(text []byte) {
	for len(text) > 0 {
		n := validPrefix(text)
		for s := text[:n]; len(s) > 0; {
			p := pieceLen(s)
			if p > 1 {
				c.add(s[:p], 1)
			}
			s = s[p:]
		}
		if n < len(text) {
			n++ // a byte of invalid UTF-8 is a piece of its own
		}
		text = text[n:]
	}
}

func (c *Counts) add(piece []byte, n int64) {
	if i, ok := c.index[string(piece)]; ok {
		c.n[i] += n
		return
	}
	s := string(piece)
	c.index[s] = int32(len(c.pieces))
	c.pieces = append(c.pieces, s)
	c.n = append(c.n, n)
}

// Merge adds the counts of o to c.
func (c *Counts) Merge(o *Counts) {
	for i, s := range o.pieces {
		c.add([]byte(s), o.n[i])
	}
	c.bytes += o.bytes
}

// TrainOptions configure Train.
type TrainOptions struct {
	// VocabSize is the size of the vocabulary: the 256 bytes, the
	// merges, and the special tokens.
	VocabSize int
	// Special lists the special tokens, which get the last ids, in order:
	// [DefaultSpecial] for GPT-2's <|endoftext|>, nil for none.
	Special []string
	// Progress, if not nil, is told the number of merges made so far and
	// the number wanted, every so often and at the end.
	Progress func(done, total int)
}

// DefaultSpecial is the special tokens Train adds unless told otherwise.
var DefaultSpecial = []string{"<|endoftext|>"}

// Train fits a byte-level BPE to the counted pieces, as GPT-2's was
// fitted: starting from the 256 bytes (ids 0 to 255, id b being the byte
// b), it merges the most frequent pair of adjacent tokens in the pieces,
// weighted by their counts, into a new token, again and again until the
// vocabulary, with the special tokens after the merges, has
// opt.VocabSize tokens, or no pair is left. Of pairs equally frequent the
// one with the smaller ids, the left one's first, merges first, so the
// result depends on nothing but the counts and the options. Pair counts
// are kept up to date merge after merge through an index of the pieces
// each pair occurs in, never recounted.
//
// The tokenizer it returns encodes as [Parse] reads the file [BPE.JSON]
// returns: a Hugging Face tokenizer.json.
func Train(c *Counts, opt TrainOptions) (*BPE, error) {
	if err := checkSpecial(opt.Special); err != nil {
		return nil, err
	}
	if min := 256 + len(opt.Special); opt.VocabSize < min {
		return nil, fmt.Errorf("vocabulary size %d is too small: the 256 bytes and %d special tokens need at least %d", opt.VocabSize, len(opt.Special), min)
	}
	want := opt.VocabSize - 256 - len(opt.Special)

	// Pieces in sorted order, so that nothing depends on how they were
	// counted.
	order := make([]int32, len(c.pieces))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(i, j int32) int { return strings.Compare(c.pieces[i], c.pieces[j]) })
	words := make([][]int32, len(order))
	counts := make([]int64, len(order))
	total := 0
	for _, p := range c.pieces {
		total += len(p)
	}
	syms := make([]int32, 0, total)
	for w, i := range order {
		start := len(syms)
		for _, b := range []byte(c.pieces[i]) {
			syms = append(syms, int32(b))
		}
		words[w] = syms[start:len(syms):len(syms)]
		counts[w] = c.n[i]
	}

	pairs := make(map[uint64]int64)
	where := make(map[uint64][]int32)
	for w, word := range words {
		for i := 0; i+1 < len(word); i++ {
			k := pairKey(word[i], word[i+1])
			pairs[k] += counts[w]
			if l := where[k]; len(l) == 0 || l[len(l)-1] != int32(w) {
				where[k] = append(l, int32(w))
			}
		}
	}
	h := make(pairHeap, 0, len(pairs))
	for k, n := range pairs {
		h = append(h, pairCount{n, k})
	}
	h.init()

	tokens := make([][]byte, 256, opt.VocabSize)
	for b := range tokens {
		tokens[b] = []byte{byte(b)}
	}
	var merges [][2]int32
	seen := make([]int32, len(words)) // merge that last looked at each word, +1
	touched := make(map[uint64]bool)
	for len(merges) < want && len(h) > 0 {
		top := h.pop()
		if n := pairs[top.key]; n != top.n {
			if n > 0 {
				h.push(pairCount{n, top.key}) // fewer since it was pushed
			}
			continue
		}
		a, b := int32(top.key>>32), int32(uint32(top.key))
		z := int32(len(tokens))
		tokens = append(tokens, append(slices.Clip(tokens[a]), tokens[b]...))
		merges = append(merges, [2]int32{a, b})
		stamp := int32(len(merges))
		clear(touched)
		for _, w := range where[top.key] {
			if seen[w] == stamp {
				continue
			}
			seen[w] = stamp
			word, n := words[w], counts[w]
			for i := 0; i+1 < len(word); i++ {
				pairs[pairKey(word[i], word[i+1])] -= n
			}
			j := 0
			for i := 0; i < len(word); j++ {
				if i+1 < len(word) && word[i] == a && word[i+1] == b {
					word[j] = z
					i += 2
				} else {
					word[j] = word[i]
					i++
				}
			}
			word = word[:j]
			words[w] = word
			for i := 0; i+1 < len(word); i++ {
				k := pairKey(word[i], word[i+1])
				pairs[k] += n
				if word[i] == z || word[i+1] == z {
					touched[k] = true
					if l := where[k]; len(l) == 0 || l[len(l)-1] != int32(w) {
						where[k] = append(l, int32(w))
					}
				}
			}
		}
		delete(where, top.key)
		delete(pairs, top.key)
		keys := make([]uint64, 0, len(touched))
		for k := range touched {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if pairs[k] > 0 {
				h.push(pairCount{pairs[k], k})
			}
		}
		if opt.Progress != nil && len(merges)%256 == 0 {
			opt.Progress(len(merges), want)
		}
	}
	if opt.Progress != nil {
		opt.Progress(len(merges), want)
	}
	return Parse(encodeFile(tokens, merges, opt.Special))
}

func checkSpecial(special []string) error {
	seen := make(map[string]bool)
	for _, s := range special {
		switch {
		case s == "":
			return errors.New("special token is empty")
		case !utf8.ValidString(s):
			return fmt.Errorf("special token %q is not valid UTF-8", s)
		case seen[s]:
			return fmt.Errorf("special token %q is given twice", s)
		}
		seen[s] = true
	}
	return nil
}

// pairCount is a pair of tokens (pairKey) and how often it occurs.
type pairCount struct {
	n   int64
	key uint64
}

// pairHeap is a binary max-heap by count, then min-heap by key.
type pairHeap []pairCount

func (a pairCount) before(b pairCount) bool { return a.n > b.n || a.n == b.n && a.key < b.key }

func (h pairHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pairHeap) push(p pairCount) {
	*h = append(*h, p)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s[i].before(s[parent]) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *pairHeap) pop() pairCount {
	s := *h
	top := s[0]
	s[0] = s[len(s)-1]
	*h = s[:len(s)-1]
	h.down(0)
	return top
}

func (h pairHeap) down(i int) {
	for {
		l, m := 2*i+1, i
		if l < len(h) && h[l].before(h[m]) {
			m = l
		}
		if r := l + 1; r < len(h) && h[r].before(h[m]) {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// encodeFile writes a Hugging Face tokenizer.json of the byte-level BPE
// with the given tokens (ids 0 to 255 the bytes, then one per merge),
// merges and special tokens, the ids after the merges'. It is laid out as
// the tokenizers library writes GPT-2's, the vocabulary in id order.
func encodeFile(tokens [][]byte, merges [][2]int32, special []string) []byte {
	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, s := range special {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n    {\n      \"id\": %d,\n      \"content\": ", len(tokens)+i)
		quote(&b, s)
		b.WriteString(",\n      \"single_word\": false,\n      \"lstrip\": false,\n      \"rstrip\": false,\n      \"normalized\": false,\n      \"special\": true\n    }")
	}
	if len(special) > 0 {
		b.WriteString("\n  ")
	}
	const byteLevelJSON = `{
    "type": "ByteLevel",
    "add_prefix_space": false,
    "trim_offsets": true,
    "use_regex": true
  }`
	b.WriteString("],\n  \"normalizer\": null,\n  \"pre_tokenizer\": " + byteLevelJSON +
		",\n  \"post_processor\": " + byteLevelJSON +
		",\n  \"decoder\": " + byteLevelJSON +
		",\n  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n" +
		"    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n" +
		"    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {")
	for id, t := range tokens {
		if id > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n      ")
		quote(&b, byteLevel(t))
		fmt.Fprintf(&b, ": %d", id)
	}
	for i, s := range special {
		b.WriteString(",\n      ")
		quote(&b, s)
		fmt.Fprintf(&b, ": %d", len(tokens)+i)
	}
	b.WriteString("\n    },\n    \"merges\": [")
	for i, m := range merges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n      ")
		quote(&b, byteLevel(tokens[m[0]])+" "+byteLevel(tokens[m[1]]))
	}
	if len(merges) > 0 {
		b.WriteString("\n    ")
	}
	b.WriteString("]\n  }\n}\n")
	return b.Bytes()
}

// ConfigJSON returns a tokenizer_config.json for a tokenizer that Train
// made, which Hugging Face's libraries read beside its tokenizer.json:
// the first special token, if any, is the end- and beginning-of-sequence
// token, and the tokenizer adds neither to what it encodes.
func ConfigJSON(t *BPE) []byte {
	var b bytes.Buffer
	b.WriteString("{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"add_bos_token\": false,\n  \"add_eos_token\": false,\n  \"add_prefix_space\": false,\n  \"clean_up_tokenization_spaces\": false,\n  \"model_max_length\": 1000000000000000019884624838656")
	var first *addedToken
	for i := range t.added {
		if t.added[i].special && (first == nil || t.added[i].id < first.id) {
			first = &t.added[i]
		}
	}
	if first != nil {
		for _, k := range []string{"bos_token", "eos_token", "unk_token"} {
			b.WriteString(",\n  \"" + k + "\": ")
			quote(&b, string(first.content))
		}
	}
	b.WriteString("\n}\n")
	return b.Bytes()
}
