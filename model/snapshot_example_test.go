package model_test

import (
	"fmt"
	"log"
	"slices"

	"github.com/polysketch/polysketch/model"
)

// Keep the state after a shared prefix and resume two continuations from
// it: each gives the logits it gets after reading the prefix itself.
func ExampleSequence_Snapshot() {
	m, err := model.New(model.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	b := m.NewBatch()
	read := func(s *model.Sequence, text string) []float32 {
		ids := make([]int32, len(text))
		for i, c := range []byte(text) {
			ids[i] = int32(c)
		}
		logits, err := b.Step([]*model.Sequence{s}, [][]int32{ids})
		if err != nil {
			log.Fatal(err)
		}
		return slices.Clone(logits.Data[:logits.Shape[1]])
	}
	prefix := "System: answer in Go.\n"
	s, _ := m.NewSequence()
	read(s, prefix)
	snap, err := s.Snapshot()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("state after %d tokens: %d bytes\n", snap.Len(), snap.Bytes())

	for _, q := range []string{"User: hello\n", "User: a loop\n"} {
		cold, _ := m.NewSequence()
		read(cold, prefix)
		want := read(cold, q)

		warm, _ := m.NewSequence()
		if err := warm.Restore(snap); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%q resumed at %d: same logits %v\n", q, warm.Len(), slices.Equal(read(warm, q), want))
	}
	// Output:
	// state after 22 tokens: 2851904 bytes
	// "User: hello\n" resumed at 22: same logits true
	// "User: a loop\n" resumed at 22: same logits true
}
