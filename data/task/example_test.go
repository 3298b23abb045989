package task_test

import (
	"fmt"
	"strings"

	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/data/tokenizer"
)

// A task is drawn from its spec: held-out test examples, and a stream of
// training examples that never repeats one of them. Targets are -1 except
// at the answer positions.
func Example() {
	spec := task.Spec{Name: task.InductionHeads, Length: 10, Vocab: 4, Test: 2, Seed: 1}
	set, err := task.New(spec, tokenizer.Byte)
	if err != nil {
		fmt.Println(err)
		return
	}
	var ex task.Example
	var next uint64 // the stream position, which a checkpoint saves
	set.Draw(&ex, &next)
	fmt.Println("ids:    ", set.Vocab())
	fmt.Println("tokens: ", ex.Tokens)
	fmt.Println("targets:", ex.Targets)
	// The special token is 4: the answer, at the second one, is the token
	// after the first.

	// Output:
	// ids:     5
	// tokens:  [3 0 4 1 3 1 1 2 4 1]
	// targets: [-1 -1 -1 -1 -1 -1 -1 -1 1 -1]
}

// Users' tasks are JSON lines; the model learns to produce the target
// after the input.
func ExampleRead() {
	file := `{"input": "2+2=", "target": "4"}
{"input": [1, 2, 3], "target": [4, 5]}`
	exs, err := task.Read(strings.NewReader(file), tokenizer.Byte, 6)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ex := range exs {
		fmt.Println(ex.Tokens, ex.Targets)
	}
	_, err = task.Read(strings.NewReader(file+"\n{\"input\": []}"), tokenizer.Byte, 6)
	fmt.Println("error: file" + err.Error())
	// Output:
	// [50 43 50 61 0 0] [-1 -1 -1 52 -1 -1]
	// [1 2 3 4 0 0] [-1 -1 4 5 -1 -1]
	// error: file:3: want both "input" and "target"
}

// Options name a task as a user does, and Spec fills in its defaults:
// here a reversal whose digits are those that fit 40 tokens.
func ExampleOptions_Spec() {
	s, err := task.Options{Name: task.Reversal}.Spec(40, 1, "byte")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %d digits of %d, %d tokens, %d held out\n", s.Name, s.Count, s.Vocab, s.Length, s.Test)
	_, err = task.Options{Name: "no-such-task"}.Spec(0, 1, "byte")
	fmt.Println(err)
	// Output:
	// reversal: 20 digits of 10, 40 tokens, 512 held out
	// unknown task "no-such-task": choose one of selective-copy, induction-heads, mqar, reversal, or give a JSON-lines task file
}
