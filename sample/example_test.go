package sample_test

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/polysketch/polysketch/sample"
)

// A bias of -100 bans a token: here every token but 2 is banned, at a
// temperature that would otherwise draw them nearly alike.
func ExampleSampler_Next() {
	set := sample.Settings{Temperature: 100, TopP: 1, LogitBias: map[int32]float64{0: -100, 1: -100, 3: -100}}
	if err := set.Validate(4); err != nil {
		fmt.Println(err)
		return
	}
	s := sample.New(set, rand.New(rand.NewPCG(1, 2)))
	logits := []float32{5, 1, 0, 3}
	var ids []int32
	for range 5 {
		id, err := s.Next(logits)
		if err != nil {
			fmt.Println(err)
			return
		}
		ids = append(ids, id)
	}
	fmt.Println(ids)
	_, err := s.Next([]float32{1, float32(math.Inf(1)), 0, 0})
	fmt.Println(err)
	// Output:
	// [2 2 2 2 2]
	// the model's logits are not finite (token 1: +Inf): its weights or activations overflow
}

func ExampleSettings_Validate() {
	set := sample.Settings{Temperature: 0.7, TopP: 0.9, PresencePenalty: 3}
	fmt.Println(set.Validate(50257))
	// Output: presence_penalty 3: must be between -2 and 2
}
