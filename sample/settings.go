package sample

import (
	"fmt"
	"math"

	"github.com/polysketch/polysketch/internal/field"
)

// Settings are how a Sampler draws, apart from its generator: the
// settings of the OpenAI API's completions (temperature, top_p,
// presence_penalty, frequency_penalty, logit_bias) and top_k.
type Settings struct {
	Temperature float64 // 0 takes the most likely token
	TopK        int     // the k most likely only; 0 for all
	TopP        float64 // the most likely of total probability TopP only; 1 for all

	// PresencePenalty is subtracted from the logit of every token drawn
	// before, FrequencyPenalty once per time it was drawn: positive
	// values make repeats less likely, negative ones more.
	PresencePenalty  float64
	FrequencyPenalty float64
	// LogitBias is added to the logits of the tokens it lists, by id;
	// -100 bans a token (its logit becomes -∞), as the OpenAI API
	// promises.
	LogitBias map[int32]float64
}

// The bounds of the settings, those of the OpenAI API.
const (
	MaxPenalty = 2   // of PresencePenalty and FrequencyPenalty, either sign
	MaxBias    = 100 // of a LogitBias value, either sign
)

// A SettingError is a setting out of its range. Field names the setting
// as the OpenAI API does: temperature, top_k, top_p, presence_penalty,
// frequency_penalty, logit_bias.
type SettingError struct {
	Field string
	Value string // the value given
	Want  string // what it must be
}

func (e *SettingError) Error() string { return e.Unwrap().Error() }

// Unwrap returns the error as internal/field writes it, for a command
// line to name the field as its flag.
func (e *SettingError) Unwrap() error {
	return field.Errorf("%s %s: %s", field.Name(e.Field), e.Value, e.Want)
}

// Validate checks the settings for a vocabulary of vocab tokens.
func (s Settings) Validate(vocab int) error {
	bad := func(field string, v any, want string) error {
		return &SettingError{Field: field, Value: fmt.Sprint(v), Want: want}
	}
	switch t := s.Temperature; {
	case !(t >= 0) || math.IsInf(t, 0):
		return bad("temperature", t, "must be 0 (greedy) or more")
	case s.TopK < 0:
		return bad("top_k", s.TopK, "must be 0 (all tokens) or more")
	case !(s.TopP > 0 && s.TopP <= 1):
		return bad("top_p", s.TopP, "must be in (0, 1]")
	case !(math.Abs(s.PresencePenalty) <= MaxPenalty):
		return bad("presence_penalty", s.PresencePenalty, fmt.Sprintf("must be between -%d and %d", MaxPenalty, MaxPenalty))
	case !(math.Abs(s.FrequencyPenalty) <= MaxPenalty):
		return bad("frequency_penalty", s.FrequencyPenalty, fmt.Sprintf("must be between -%d and %d", MaxPenalty, MaxPenalty))
	}
	banned := 0
	for id, b := range s.LogitBias {
		switch {
		case id < 0 || int(id) >= vocab:
			return bad("logit_bias", fmt.Sprintf("token %d", id), fmt.Sprintf("not a token of the vocabulary [0, %d)", vocab))
		case !(math.Abs(b) <= MaxBias):
			return bad("logit_bias", fmt.Sprintf("of token %d: %v", id, b), fmt.Sprintf("must be between -%d and %d", MaxBias, MaxBias))
		case b == -MaxBias:
			banned++
		}
	}
	if banned == vocab {
		return bad("logit_bias", fmt.Sprintf("of -%d for all %d tokens", MaxBias, vocab), "bans every token: leave one to draw")
	}
	return nil
}
