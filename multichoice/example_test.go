package multichoice_test

import (
	"fmt"

	"github.com/polysketch/polysketch/multichoice"
)

// A PIQA question read from a file, with one solved example before it:
// the prompt and the continuations whose likelihoods score its choices,
// as lm-evaluation-harness lays them out.
func Example() {
	set, err := multichoice.ReadFile("testdata/piqa.jsonl", multichoice.Auto)
	if err != nil {
		fmt.Println(err)
		return
	}
	ex := set.Examples[1]
	shots, err := multichoice.Shots{K: 1, Pool: set.Examples, Seed: 1}.Draw(ex)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s, %d examples\n", set.Format, len(set.Examples))
	fmt.Printf("%q\n", multichoice.Prompt(ex, shots))
	fmt.Printf("%q, right: %d\n", multichoice.Continuations(ex), ex.Label)
	// Output:
	// piqa, 4 examples
	// "Question: To keep bread fresh for longer,\nAnswer: store it in a sealed bag in a cool place.\n\nQuestion: How do you open a jar whose lid is stuck?\nAnswer:"
	// [" Freeze the jar overnight." " Run the lid under hot water, then twist it."], right: 1
}

// The accuracies of four questions of which the log-likelihoods picked
// three right and the per-character rule two, with the harness's
// standard errors.
func ExampleSummarize() {
	samples := []multichoice.Sample{
		{Label: 0, Pred: 0, PredNorm: 0},
		{Label: 1, Pred: 1, PredNorm: 0},
		{Label: 2, Pred: 2, PredNorm: 2},
		{Label: 3, Pred: 0, PredNorm: 1},
	}
	r := multichoice.Summarize(samples)
	fmt.Printf("acc %.2f ± %.4f, acc_norm %.2f ± %.4f\n", r.Acc.Value, r.Acc.StdErr, r.AccNorm.Value, r.AccNorm.StdErr)
	// Output:
	// acc 0.75 ± 0.2500, acc_norm 0.50 ± 0.2887
}
