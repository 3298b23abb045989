package sample

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestLogitBias checks that a bias of -100 bans a token whatever the
// setting, even at a temperature that draws uniformly, and that +100
// makes a token all but certain at temperature 1.
func TestLogitBias(t *testing.T) {
	logits := []float32{3, 2.5, 2, 1, 0.5, -1, 4, 0}
	for _, set := range []Settings{
		{Temperature: 0, TopP: 1},
		{Temperature: 1, TopP: 1},
		{Temperature: 1e300, TopP: 1},
		{Temperature: 1e300, TopK: 3, TopP: 1},
		{Temperature: 1e300, TopP: 0.999999},
	} {
		set.LogitBias = map[int32]float64{6: -100, 0: -100}
		s := New(set, rand.New(rand.NewPCG(1, 2)))
		for range 2000 {
			if got := draw(t, s, logits); got == 6 || got == 0 {
				t.Fatalf("%+v: drew banned token %d", set, got)
			}
		}
	}
	s := New(Settings{Temperature: 1, TopP: 1, LogitBias: map[int32]float64{5: 100}}, rand.New(rand.NewPCG(3, 4)))
	for range 1000 {
		if got := draw(t, s, logits); got != 5 {
			t.Fatalf("bias +100 on token 5: drew %d", got)
		}
	}
	// Next leaves the caller's logits as they were.
	if !slices.Equal(logits, []float32{3, 2.5, 2, 1, 0.5, -1, 4, 0}) {
		t.Errorf("logits changed: %v", logits)
	}
}

// TestPenalties draws greedily with penalties and checks each token
// against the logits the OpenAI API's formula gives, computed here from
// the tokens drawn before.
func TestPenalties(t *testing.T) {
	logits := []float32{2, 1.7, 1.5, -3}
	for _, set := range []Settings{
		{PresencePenalty: 0.4, TopP: 1},
		{FrequencyPenalty: 0.25, TopP: 1},
		{PresencePenalty: 0.3, FrequencyPenalty: 0.1, TopP: 1},
		{PresencePenalty: -0.5, TopP: 1}, // repeats made more likely
	} {
		s := New(set, nil)
		count := map[int32]int{}
		var got, want []int32
		for range 12 {
			adj := make([]float32, len(logits))
			for j, l := range logits {
				c := float64(count[int32(j)])
				p := 0.0
				if c > 0 {
					p = set.PresencePenalty
				}
				adj[j] = l - float32(c*set.FrequencyPenalty+p)
			}
			w := Argmax(adj)
			id := draw(t, s, logits)
			got, want = append(got, id), append(want, w)
			count[id]++
		}
		if !slices.Equal(got, want) {
			t.Errorf("%+v: drew %v, want %v", set, got, want)
		}
		if set.PresencePenalty > 0 && len(count) < 2 {
			t.Errorf("%+v: drew only %v: the penalty had no effect", set, got)
		}
	}
}

// TestNonFinite checks that logits holding NaN or an infinity are an
// error naming the first such token, and that finite logits whose sum
// overflows are not.
func TestNonFinite(t *testing.T) {
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		logits := make([]float32, 1000)
		logits[700], logits[900] = bad, bad
		for _, set := range []Settings{{Temperature: 0, TopP: 1}, {Temperature: 1, TopP: 1}, {Temperature: 1, TopK: 5, TopP: 0.5}} {
			_, err := New(set, rand.New(rand.NewPCG(1, 1))).Next(logits)
			var nf *NonFiniteError
			if !errors.As(err, &nf) || nf.Token != 700 {
				t.Errorf("%v at token 700, %+v: %v, want a NonFiniteError at token 700", bad, set, err)
			}
		}
	}
	huge := []float32{3e38, 3e38, -3e38, 1}
	if got := draw(t, New(Settings{TopP: 1}, nil), huge); got != 0 {
		t.Errorf("greedy on %v: %d, want 0", huge, got)
	}
}

func TestValidate(t *testing.T) {
	good := Settings{Temperature: 0.7, TopK: 40, TopP: 0.9, PresencePenalty: -2, FrequencyPenalty: 2, LogitBias: map[int32]float64{0: -100, 9: 100}}
	if err := good.Validate(10); err != nil {
		t.Errorf("%+v: %v", good, err)
	}
	nan := math.NaN()
	for _, tc := range []struct {
		edit  func(s *Settings)
		field string
		want  string
	}{
		{func(s *Settings) { s.Temperature = -1 }, "temperature", "temperature -1: must be 0 (greedy) or more"},
		{func(s *Settings) { s.Temperature = math.Inf(1) }, "temperature", "temperature +Inf"},
		{func(s *Settings) { s.TopK = -1 }, "top_k", "top_k -1: must be 0 (all tokens) or more"},
		{func(s *Settings) { s.TopP = 0 }, "top_p", "top_p 0: must be in (0, 1]"},
		{func(s *Settings) { s.TopP = nan }, "top_p", "top_p NaN"},
		{func(s *Settings) { s.PresencePenalty = 2.5 }, "presence_penalty", "presence_penalty 2.5: must be between -2 and 2"},
		{func(s *Settings) { s.FrequencyPenalty = nan }, "frequency_penalty", "frequency_penalty NaN"},
		{func(s *Settings) { s.LogitBias = map[int32]float64{10: 1} }, "logit_bias", "logit_bias token 10: not a token of the vocabulary [0, 10)"},
		{func(s *Settings) { s.LogitBias = map[int32]float64{-1: 1} }, "logit_bias", "logit_bias token -1"},
		{func(s *Settings) { s.LogitBias = map[int32]float64{3: -101} }, "logit_bias", "logit_bias of token 3: -101: must be between -100 and 100"},
		{func(s *Settings) {
			s.LogitBias = map[int32]float64{}
			for i := range int32(10) {
				s.LogitBias[i] = -100
			}
		}, "logit_bias", "bans every token"},
	} {
		s := good
		tc.edit(&s)
		err := s.Validate(10)
		var se *SettingError
		if !errors.As(err, &se) || se.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a SettingError of %s containing %q", s, err, tc.field, tc.want)
		}
	}
}
