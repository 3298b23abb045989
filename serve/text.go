package serve

import (
	"bytes"
	"unicode/utf8"
)

// textStream turns a sequence's decoded bytes into the text a client may
// see so far. It holds back what could still become a stop string, and
// the first bytes of a character not yet complete (a byte-level model
// emits UTF-8 one byte per token), so that streamed pieces are valid
// UTF-8 and never show the start of a stop string that is then cut.
type textStream struct {
	stop    [][]byte
	pending []byte
}

func newTextStream(stop []string) *textStream {
	t := &textStream{}
	for _, s := range stop {
		if s != "" {
			t.stop = append(t.stop, []byte(s))
		}
	}
	return t
}

// add appends b and returns the text that can be shown now, and whether a
// stop string has appeared: the text then ends before it, and the stream
// is done.
func (t *textStream) add(b []byte) (string, bool) {
	t.pending = append(t.pending, b...)
	cut := -1
	for _, s := range t.stop {
		if i := bytes.Index(t.pending, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		out := valid(t.pending[:cut])
		t.pending = t.pending[:0]
		return out, true
	}
	hold := 0
	for _, s := range t.stop {
		// The longest end of pending that begins s.
		for n := min(len(s)-1, len(t.pending)); n > hold; n-- {
			if bytes.HasSuffix(t.pending, s[:n]) {
				hold = n
				break
			}
		}
	}
	hold = max(hold, partialRune(t.pending))
	out := valid(t.pending[:len(t.pending)-hold])
	t.pending = append(t.pending[:0], t.pending[len(t.pending)-hold:]...)
	return out, false
}

// flush returns whatever is held back, at the end of the stream.
func (t *textStream) flush() string {
	out := valid(t.pending)
	t.pending = t.pending[:0]
	return out
}

// partialRune returns the number of bytes at the end of b that begin a
// UTF-8 character whose remaining bytes have not arrived yet.
func partialRune(b []byte) int {
	for n := 1; n <= min(3, len(b)); n++ {
		c := b[len(b)-n]
		if c < 0x80 {
			return 0 // ASCII: nothing pending
		}
		if utf8.RuneStart(c) {
			// A leading byte: pending if it announces more bytes than follow.
			need := 0
			switch {
			case c&0xE0 == 0xC0:
				need = 2
			case c&0xF0 == 0xE0:
				need = 3
			case c&0xF8 == 0xF0:
				need = 4
			}
			if need > n && !utf8.FullRune(b[len(b)-n:]) {
				return n
			}
			return 0
		}
	}
	return 0
}

// valid returns b as a string with each byte that is not part of valid
// UTF-8 (which a model can generate) replaced by U+FFFD, as JSON requires
// valid text. Byte by byte, so that text cut into pieces gets the same
// replacements as the whole.
func valid(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return string([]rune(string(b)))
}
