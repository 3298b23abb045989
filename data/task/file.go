package task

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/regular"
)

// fileLine is one line of a task file.
type fileLine struct {
	Input  json.RawMessage `json:"input"`
	Target json.RawMessage `json:"target"`
}

// ReadFile reads a task file: JSON lines, each an object with an "input"
// and a "target", both lists of token ids or both strings, encoded by tok.
// The model reads the input and then the target, and learns to produce
// the target: an example is the input followed by the target but its last
// token, padded to length with 0, with targets on the positions that
// predict a token of the target only. Blank lines are skipped.
//
// The file is read whole before anything is returned: a line that does not
// parse, an id outside tok's vocabulary, an empty input or target, or an
// example longer than length is an error naming the file and line, and no
// examples.
func ReadFile(path string, tok tokenizer.Tokenizer, length int) ([]Example, error) {
	f, err := regular.Open(path)
	if err != nil {
		return nil, fmt.Errorf("task file: %w", err)
	}
	defer f.Close()
	exs, err := Read(f, tok, length)
	if err != nil {
		return nil, fmt.Errorf("task file %s%w", path, err)
	}
	return exs, nil
}

// Read reads a task file from r (see ReadFile). Its errors start with
// ":line: ", to follow the file's name.
func Read(r io.Reader, tok tokenizer.Tokenizer, length int) ([]Example, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	var exs []Example
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		ex, err := parseLine(line, tok, length)
		if err != nil {
			return nil, fmt.Errorf(":%d: %w", n, err)
		}
		exs = append(exs, ex)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf(": %w", err)
	}
	if len(exs) == 0 {
		return nil, errors.New(": no examples (want JSON lines of {\"input\": ..., \"target\": ...})")
	}
	return exs, nil
}

func parseLine(line []byte, tok tokenizer.Tokenizer, length int) (Example, error) {
	in, tg, err := parsePair(line, tok)
	if err != nil {
		return Example{}, err
	}
	if n := len(in) + len(tg) - 1; n > length {
		return Example{}, fmt.Errorf("input of %d tokens and target of %d make %d positions, more than the context %d: raise the context or shorten the example",
			len(in), len(tg), n, length)
	}
	var ex Example
	reset(&ex, length)
	copy(ex.Tokens, in)
	copy(ex.Tokens[len(in):], tg[:len(tg)-1])
	copy(ex.Targets[len(in)-1:], tg)
	return ex, nil
}

// parsePair returns the ids of the input and target of a line.
func parsePair(line []byte, tok tokenizer.Tokenizer) (in, tg []int32, err error) {
	var l fileLine
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(&l); err != nil {
		return nil, nil, fmt.Errorf("not a JSON object {\"input\": ..., \"target\": ...}: %v", err)
	}
	if l.Input == nil || l.Target == nil {
		return nil, nil, errors.New(`want both "input" and "target"`)
	}
	if in, err = ids(l.Input, tok, "input"); err != nil {
		return nil, nil, err
	}
	if tg, err = ids(l.Target, tok, "target"); err != nil {
		return nil, nil, err
	}
	if len(in) == 0 || len(tg) == 0 {
		return nil, nil, fmt.Errorf("input of %d tokens and target of %d: neither may be empty", len(in), len(tg))
	}
	return in, tg, nil
}

// FileLength returns the length that the examples of a task file need,
// read with tok: the positions of its longest, its input and its target
// but the target's last token. Its errors are those of ReadFile.
func FileLength(path string, tok tokenizer.Tokenizer) (int, error) {
	f, err := regular.Open(path)
	if err != nil {
		return 0, fmt.Errorf("task file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	longest := 0
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		in, tg, err := parsePair(line, tok)
		if err != nil {
			return 0, fmt.Errorf("task file %s:%d: %w", path, n, err)
		}
		longest = max(longest, len(in)+len(tg)-1)
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("task file %s: %w", path, err)
	}
	if longest == 0 {
		return 0, fmt.Errorf("task file %s: no examples (want JSON lines of {\"input\": ..., \"target\": ...})", path)
	}
	return longest, nil
}

// ids decodes a list of ids, checked against tok's vocabulary, or a string,
// encoded by tok.
func ids(raw json.RawMessage, tok tokenizer.Tokenizer, what string) ([]int32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%s: %v", what, err)
		}
		ids, err := tok.Encode(context.Background(), nil, []byte(s))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return ids, nil
	}
	var v []int64
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s: want a list of token ids or a string", what)
	}
	out := make([]int32, len(v))
	for i, id := range v {
		if id < 0 || id >= int64(tok.VocabSize()) {
			return nil, fmt.Errorf("%s: token id %d outside the %s tokenizer's vocabulary [0, %d)", what, id, tok.Name(), tok.VocabSize())
		}
		out[i] = int32(id)
	}
	return out, nil
}
