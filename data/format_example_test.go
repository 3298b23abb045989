package data_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/tokenizer"
)

// A corpus of JSON lines whose text is in a field other than "text", and
// an image that NewCorpus leaves out.
func ExampleCorpus_TextField() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	lines := `{"id": 1, "content": "first document "}
{"id": 2, "content": "second document "}
{"id": 3, "content": null}
{"id": 4, "content": "third document"}
`
	if err := os.WriteFile(filepath.Join(dir, "docs.jsonl"), []byte(lines), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "logo.png"), []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), 0o644); err != nil {
		log.Fatal(err)
	}

	corpus, err := data.NewCorpus(dir)
	if err != nil {
		log.Fatal(err)
	}
	corpus.TextField = "content"
	fmt.Println(corpus.Files[0].Name, corpus.Files[0].Format, "—", corpus.BinaryNote())

	train, val, err := data.Load(context.Background(), corpus, tokenizer.Byte, data.Options{CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		log.Fatal(err)
	}
	defer train.Close()
	defer val.Close()
	ids := make([]int32, train.Len())
	if err := train.Copy(ids, 0); err != nil {
		log.Fatal(err)
	}
	text, _ := tokenizer.Byte.Decode(nil, ids)
	fmt.Printf("%q\n", text) // less the last 5%, held out for validation
	// Output:
	// docs.jsonl JSON lines — skipped 1 file of binary data (logo.png)
	// "first document second document third docum"
}
