package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/atomicfile"
)

var tokenizerCommands = map[string]command{
	"train":  {"fit a byte-level BPE vocabulary to a corpus; writes a Hugging Face tokenizer.json", runTokenizerTrain},
	"encode": {"text on stdin to a JSON array of token ids on stdout", runTokenizerEncode},
	"decode": {"a JSON array of token ids on stdin to text on stdout", runTokenizerDecode},
}

func runTokenizer(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout, "polysketch tokenizer", tokenizerCommands)
		return nil
	}
	c, ok := tokenizerCommands[args[0]]
	if !ok {
		return fmt.Errorf("unknown tokenizer command %q; run 'polysketch tokenizer help' for the list", args[0])
	}
	return c.run(args[1:], stdout)
}

// stdin is what encode and decode read; tests replace it.
var stdin io.Reader = os.Stdin

const tokenizerFlagHelp = "byte, gpt2, or a Hugging Face tokenizer.json (or a directory holding one)"

const tokenizerTrainHelp = `usage: polysketch tokenizer train [flags]

Fits a byte-level BPE vocabulary to a corpus (by default the Go toolchain's
source tree), as GPT-2's was fitted: text is split into pieces by GPT-2's
pattern, counted, and the most frequent pair of adjacent tokens is merged
into a new one until the vocabulary has --vocab-size tokens: the 256 bytes,
the merges, then the --special tokens. The same corpus and flags give the
same files, byte for byte.

It writes --out/tokenizer.json (a Hugging Face tokenizer file, which the
tokenizers libraries of Python and JavaScript load unchanged) and
--out/tokenizer_config.json. Use it with --tokenizer DIR in train, or with
polysketch tokenizer encode and decode.

flags:
`

func runTokenizerTrain(args []string, stdout io.Writer) (err error) {
	fs := newFlags("tokenizer train", tokenizerTrainHelp, stdout)
	defer asCLI(fs, &err)
	var corpus []string
	var textField string
	var maxRecord byteSize
	special := specialFlag{list: tokenizer.DefaultSpecial}
	var (
		vocab   = fs.Int("vocab-size", 0, "tokens in the vocabulary: 256 bytes, the merges and the special tokens (required)")
		out     = fs.String("out", "", "directory to write tokenizer.json and tokenizer_config.json in (required)")
		force   = fs.Bool("force", false, "replace a tokenizer.json already in --out")
		workers = fs.Int("workers", 2, "goroutines counting the corpus's pieces")
	)
	corpusFlags(fs, &corpus, &textField, nil, &maxRecord, "the Go source tree, GOROOT/src", `"text"`)
	fs.Var(&special, "special", `special token, repeated for several, "" for none (default "<|endoftext|>")`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch min := 256 + len(special.list); {
	case *vocab == 0:
		return errors.New("tokenizer train: --vocab-size is required: the number of tokens, at least 256 plus the special tokens")
	case *vocab < min:
		return fmt.Errorf("tokenizer train: --vocab-size %d is too small: the 256 bytes and %d special tokens need at least %d", *vocab, len(special.list), min)
	case *out == "":
		return errors.New("tokenizer train: --out is required: the directory to write tokenizer.json in")
	case *workers < 1:
		return fmt.Errorf("tokenizer train: --workers %d: must be positive", *workers)
	}
	path := filepath.Join(*out, tokenizer.FileName)
	if _, err := os.Stat(path); err == nil && !*force {
		return fmt.Errorf("tokenizer train: %s already exists; pass --force to replace it, or choose another --out", path)
	}
	if info, err := os.Stat(*out); err == nil && !info.IsDir() {
		return fmt.Errorf("tokenizer train: --out %s is a file, not a directory", *out)
	}

	c, err := data.OpenPaths(corpus, textField)
	if err != nil {
		return fmt.Errorf("tokenizer train: %w", err)
	}
	c.MaxRecord = int64(maxRecord)
	p := newProgress(stderr, 1)
	p.logf("corpus: %s", c.Summary())
	if note := c.BinaryNote(); note != "" {
		p.logf("corpus: %s", note)
	}

	start := time.Now()
	counts := make([]*tokenizer.Counts, *workers)
	for i := range counts {
		counts[i] = tokenizer.NewCounts(special.list)
	}
	var done, binary atomic.Int64
	stop := p.ticker(func() string {
		d := time.Since(start).Seconds()
		return fmt.Sprintf("counting pieces: %.1f of %.1f MB (%.1f MB/s)", float64(done.Load())/1e6, float64(c.Bytes())/1e6, float64(done.Load())/1e6/d)
	})
	err = c.EachText(*workers, func(w int, text []byte) {
		done.Add(int64(len(text)))
		if bytes.IndexByte(text, 0) >= 0 {
			binary.Add(int64(len(text))) // NUL never appears in text
			return
		}
		counts[w].Add(text)
	})
	stop()
	if err != nil {
		return fmt.Errorf("tokenizer train: %w", err)
	}
	all := counts[0]
	for _, o := range counts[1:] {
		all.Merge(o)
	}
	countTime := time.Since(start)
	if all.Words() == 0 {
		if binary.Load() > 0 {
			return fmt.Errorf("tokenizer train: corpus %s has no text to train on: %.1f MB of it is binary (NUL bytes); give text files", c.Desc, float64(binary.Load())/1e6)
		}
		return fmt.Errorf("tokenizer train: corpus %s has no text to train on (no two characters together); give text files", c.Desc)
	}
	if binary.Load() > 0 {
		p.logf("skipped %.1f MB of binary text (NUL bytes)", float64(binary.Load())/1e6)
	}
	p.logf("counted %s distinct pieces in %.1f MB in %.1fs (%.1f MB/s)", count(all.Words()), float64(all.Bytes())/1e6, countTime.Seconds(), float64(done.Load())/1e6/countTime.Seconds())

	mergeStart := time.Now()
	var merged atomic.Int64
	var total int
	stop = p.ticker(func() string {
		return fmt.Sprintf("merging: %d of %d", merged.Load(), total)
	})
	tok, err := tokenizer.Train(all, tokenizer.TrainOptions{VocabSize: *vocab, Special: special.list, Progress: func(d, t int) {
		merged.Store(int64(d))
		total = t
	}})
	stop()
	if err != nil {
		return fmt.Errorf("tokenizer train: %w", err)
	}
	if tok.VocabSize() < *vocab {
		p.logf("the corpus ran out of pairs to merge: the vocabulary has %d tokens, not %d", tok.VocabSize(), *vocab)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("tokenizer train: --out: %w", err)
	}
	if err := atomicfile.WriteBytes(filepath.Join(*out, "tokenizer_config.json"), tokenizer.ConfigJSON(tok)); err != nil {
		return fmt.Errorf("tokenizer train: %w", err)
	}
	if err := atomicfile.WriteBytes(path, tok.JSON()); err != nil {
		return fmt.Errorf("tokenizer train: %w", err)
	}
	total2 := time.Since(start)
	fmt.Fprintf(stdout, "vocabulary of %d tokens fitted to %.1f MB in %.1fs (%.1f MB/s; merges %.1fs): %s\n",
		tok.VocabSize(), float64(all.Bytes())/1e6, total2.Seconds(), float64(done.Load())/1e6/total2.Seconds(), time.Since(mergeStart).Seconds(), path)
	return nil
}

// ticker shows the line line returns on p every second until stop is
// called.
func (p *progress) ticker(line func() string) (stop func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-quit:
				p.clear()
				return
			case <-t.C:
				if p.terminal {
					p.clear()
					fmt.Fprintf(p.w, "%s", line())
					p.shown = true
				} else {
					fmt.Fprintln(p.w, line())
				}
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// specialFlag is the list of special tokens: repeated, "" for none. Unlike
// listFlag it does not split at commas, which a token may hold.
type specialFlag struct {
	list []string
	set  bool
}

func (s *specialFlag) String() string { return "" }

func (s *specialFlag) Set(v string) error {
	if !s.set {
		s.list, s.set = nil, true
	}
	if v != "" {
		s.list = append(s.list, v)
	}
	return nil
}

func runTokenizerEncode(args []string, stdout io.Writer) error {
	fs := newFlags("tokenizer encode", "usage: polysketch tokenizer encode --tokenizer PATH < text > ids\n\nEncodes the text on stdin, all of it, into a JSON array of token ids on\nstdout. Added and special tokens in the text are encoded as such.\n\nflags:\n", stdout)
	var name string
	tokenizerFlag(fs, &name, "the tokenizer (required)")
	nul := fs.Bool("nul", false, "stdin holds texts separated by NUL bytes: encode each alone, one JSON array a line")
	special := fs.Bool("special", false, "put the tokens the tokenizer.json's post-processor adds around a text (Llama's <s>) before and after it, as Hugging Face's libraries encode by default")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tok, err := openTokenizer("tokenizer encode", name)
	if err != nil {
		return err
	}
	text, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("tokenizer encode: reading stdin: %w", err)
	}
	var before, after []int32
	if b, ok := tok.(*tokenizer.BPE); ok && *special {
		before, after = b.Wrap()
	}
	texts := [][]byte{text}
	if *nul {
		texts = bytes.Split(text, []byte{0})
	}
	ctx, stop := interruptible()
	defer stop()
	w := bufio.NewWriter(stdout)
	var ids []int32
	for _, text := range texts {
		if ids, err = tok.Encode(ctx, append(ids[:0], before...), text); err != nil {
			return fmt.Errorf("tokenizer encode: %w", err)
		}
		ids = append(ids, after...)
		w.WriteByte('[')
		for i, id := range ids {
			if i > 0 {
				w.WriteByte(',')
			}
			fmt.Fprint(w, id)
		}
		w.WriteString("]\n")
	}
	return w.Flush()
}

func runTokenizerDecode(args []string, stdout io.Writer) error {
	fs := newFlags("tokenizer decode", "usage: polysketch tokenizer decode --tokenizer PATH < ids > text\n\nDecodes the JSON array of token ids on stdin into text on stdout, as\nHugging Face's libraries decode them (special tokens kept).\n\nflags:\n", stdout)
	var name string
	tokenizerFlag(fs, &name, "the tokenizer (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tok, err := openTokenizer("tokenizer decode", name)
	if err != nil {
		return err
	}
	var ids []int32
	dec := json.NewDecoder(stdin)
	if err := dec.Decode(&ids); err != nil {
		return fmt.Errorf("tokenizer decode: stdin: want a JSON array of token ids: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("tokenizer decode: stdin: want one JSON array of token ids, found more after it")
	}
	text, err := tokenizer.Text(tok, nil, ids)
	if err != nil {
		return fmt.Errorf("tokenizer decode: %w", err)
	}
	_, err = stdout.Write(text)
	return err
}

// openTokenizer resolves the value of a --tokenizer flag of command cmd:
// byte, gpt2, or a tokenizer.json or a directory holding one.
func openTokenizer(cmd, arg string) (tokenizer.Tokenizer, error) {
	if arg == "" {
		return nil, fmt.Errorf("%s: --tokenizer is required: byte, gpt2, or a tokenizer.json or a directory holding one", cmd)
	}
	tok, err := tokenizer.Open(arg)
	if err != nil {
		return nil, fmt.Errorf("%s: --tokenizer: %w", cmd, err)
	}
	return tok, nil
}
