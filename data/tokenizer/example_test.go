package tokenizer_test

import (
	"context"
	"fmt"
	"log"

	"github.com/polysketch/polysketch/data/tokenizer"
)

func Example() {
	tok, err := tokenizer.Lookup("gpt2")
	if err != nil {
		log.Fatal(err)
	}
	ids, err := tok.Encode(context.Background(), nil, []byte("Hello world"))
	if err != nil {
		log.Fatal(err)
	}
	text, err := tok.Decode(nil, ids)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ids, string(text))

	ids, _ = tokenizer.Byte.Encode(context.Background(), nil, []byte("Hi\xff")) // the byte tokenizer never fails
	fmt.Println(ids, tokenizer.Byte.VocabSize())
	// Output:
	// [15496 995] Hello world
	// [72 105 255] 256
}

// A stream of several documents separates them with the end-of-text token
// where the tokenizer has one.
func ExampleEndOfText() {
	for _, name := range tokenizer.Names() {
		tok, err := tokenizer.Lookup(name)
		if err != nil {
			log.Fatal(err)
		}
		var ids []int32
		for i, doc := range []string{"one", "two"} {
			if eot, ok := tokenizer.EndOfText(tok); ok && i > 0 {
				ids = append(ids, eot)
			}
			if ids, err = tok.Encode(context.Background(), ids, []byte(doc)); err != nil {
				log.Fatal(err)
			}
		}
		text, err := tok.Decode(nil, ids)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %v %q\n", name, ids, text)
	}
	// Output:
	// byte: [111 110 101 116 119 111] "onetwo"
	// gpt2: [505 50256 11545] "one<|endoftext|>two"
}
