package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/polysketch/polysketch/data/tokenizer"
)

func Example() {
	tok, err := tokenizer.Lookup("gpt2")
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode(nil, []byte("Hello world"))
	text, err := tok.Decode(nil, ids)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ids, string(text))

	ids = tokenizer.Byte.Encode(nil, []byte("Hi\xff"))
	fmt.Println(ids, tokenizer.Byte.VocabSize())
	// Output:
	// [15496 995] Hello world
	// [72 105 255] 256
}
