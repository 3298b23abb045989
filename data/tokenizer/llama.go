package tokenizer

// The split patterns of Llama-3's and Qwen2's tokenizer.json files, which
// differ only in how many digits a piece holds (up to three, or one). For
// these, Parse uses llamaPieceLen instead of a regular expression: the
// same pieces, eight times as fast.
const (
	llama3Split = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Split  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// llamaPieceLen returns the length in bytes of the first piece of s
// (valid, non-empty UTF-8) under llama3Split if digits is 3, qwen2Split if
// it is 1: the first alternative that matches at the start of s, as a
// backtracking engine finds it. Character classes are those of pieceLen.
func llamaPieceLen(s []byte, digits int) int {
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[0] == '\'' && len(s) > 1 {
		switch s[1] | 0x20 {
		case 's', 't', 'm', 'd':
			return 2
		case 'r', 'v':
			if len(s) > 2 && s[2]|0x20 == 'e' {
				return 3
			}
		case 'l':
			if len(s) > 2 && s[2]|0x20 == 'l' {
				return 3
			}
		}
	}
	cls, n := class(s)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if cls == letter {
		return n + run(s[n:], letter)
	}
	if cls != number && s[0] != '\r' && s[0] != '\n' && n < len(s) {
		if c, _ := class(s[n:]); c == letter {
			return n + run(s[n:], letter)
		}
	}
	// \p{N}{1,3} or \p{N}
	if cls == number {
		i := n
		for k := 1; k < digits && i < len(s); k++ {
			c, m := class(s[i:])
			if c != number {
				break
			}
			i += m
		}
		return i
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	i := 0
	if s[0] == ' ' {
		i = 1
	}
	if i < len(s) {
		if c, _ := class(s[i:]); c == other {
			i += run(s[i:], other)
			for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
				i++
			}
			return i
		}
	}
	// What is left starts with white space. \s*[\r\n]+ takes it up to
	// its last line break, if it has one.
	end, lastNL, last := 0, -1, 0
	for end < len(s) {
		c, m := class(s[end:])
		if c != space {
			break
		}
		if s[end] == '\r' || s[end] == '\n' {
			lastNL = end
		}
		last = end
		end += m
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S) takes all of a run that ends the text, or all but its last
	// character, left to lead what follows; \s+ takes a lone one.
	if end == len(s) || last == 0 {
		return end
	}
	return last
}

// run returns the length of the run of characters of class cls that s
// starts with.
func run(s []byte, cls uint8) int {
	i := 0
	for i < len(s) {
		c, n := class(s[i:])
		if c != cls {
			break
		}
		i += n
	}
	return i
}
