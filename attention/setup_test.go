package attention

import (
	"strings"
	"testing"
)

// TestSetupHeadSize checks, for every conformance row, that a mechanism
// given the head size in Setup lists its parameters before the first
// Forward and computes the bits of one that takes the head size from the
// first Forward, and that a negative head size is refused in one line.
func TestSetupHeadSize(t *testing.T) {
	q, k, v := conformanceInputs(5, confN)
	for _, c := range conformanceCases {
		t.Run(c.spec, func(t *testing.T) {
			cfg, err := ParseSpec(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			sized := c.build(t, true)
			late, err := New(cfg, Setup{Causal: true, Seed: 7})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(c.spec, "learned") {
				if len(sized.(Trainable).Params()) == 0 {
					t.Error("no parameters before the first Forward with Setup.HeadSize")
				}
				if len(late.(Trainable).Params()) != 0 {
					t.Error("parameters before the first Forward without Setup.HeadSize")
				}
			}
			requireEqual(t, "output", forward(sized, q, k, v), forward(late, q, k, v))

			_, err = New(cfg, Setup{Causal: true, HeadSize: -1})
			if err == nil || !strings.Contains(err.Error(), "head size -1") || strings.Contains(err.Error(), "\n") {
				t.Errorf("HeadSize -1: error %v, want one line naming the head size", err)
			}
		})
	}
}
