package tokenizer

import "unicode/utf8"

// Byte-level BPE files (GPT-2's, Hugging Face's ByteLevel) write each byte
// of a token as a printable character: bytes that are printable Latin-1
// characters stand for themselves, and the others (controls, space, DEL,
// NBSP, soft hyphen) for the characters from U+0100 up, in byte order, so
// that a token's string never holds a space or control character. " the"
// is "Ġthe" in such a file.
var (
	byteRune [256]rune
	runeByte map[rune]byte
)

func init() {
	runeByte = make(map[rune]byte, 256)
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae && b <= 0xff) {
			r = next
			next++
		}
		byteRune[b] = r
		runeByte[r] = byte(b)
	}
}

// byteLevel returns the string that stands for b in byte-level files.
func byteLevel(b []byte) string {
	s := make([]byte, 0, 2*len(b))
	for _, c := range b {
		s = utf8.AppendRune(s, byteRune[c])
	}
	return string(s)
}

// fromByteLevel returns the bytes that s stands for, or false if s holds a
// character that stands for no byte.
func fromByteLevel(s string) ([]byte, bool) {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		c, ok := runeByte[r]
		if !ok {
			return nil, false
		}
		b = append(b, c)
	}
	return b, true
}
