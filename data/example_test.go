package data_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/tokenizer"
)

// A training loop's view of the package: a corpus, its tokens, random
// batches for training and sequential ones for evaluation.
func Example() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	text := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 20)
	if err := os.WriteFile(filepath.Join(dir, "fox.txt"), []byte(text), 0o644); err != nil {
		log.Fatal(err)
	}

	corpus, err := data.NewCorpus(filepath.Join(dir, "*.txt")) // or data.GoSource()
	if err != nil {
		log.Fatal(err)
	}
	tok, err := tokenizer.Lookup("byte")
	if err != nil {
		log.Fatal(err)
	}
	train, val, err := data.Load(context.Background(), corpus, tok, data.Options{CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		log.Fatal(err)
	}
	defer train.Close()
	defer val.Close()
	fmt.Println("tokens:", train.Len(), "training,", val.Len(), "validation")

	batches, err := data.NewRandom(train, 4, 16, 1) // 4 windows of 16+1 tokens
	if err != nil {
		log.Fatal(err)
	}
	var b data.Batch
	if err := batches.Next(&b); err != nil {
		log.Fatal(err)
	}
	in, _ := tok.Decode(nil, b.Inputs(0))
	target, _ := tok.Decode(nil, b.Targets(0))
	fmt.Printf("%d×%d batch: %q predicts %q\n", b.B, b.N, in, target)
	state, _ := batches.State() // saved with a checkpoint, restored by SetState

	eval, err := data.NewSequential(val, 4, 16, 0)
	if err != nil {
		log.Fatal(err)
	}
	targets := 0
	for {
		err := eval.Next(&b)
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		targets += b.B * b.N
	}
	fmt.Println("evaluation batches:", eval.Batches(), "targets:", targets, "state bytes:", len(state))
	// Output:
	// tokens: 855 training, 45 validation
	// 4×16 batch: " fox jumps over " predicts "fox jumps over t"
	// evaluation batches: 1 targets: 32 state bytes: 20
}
