package experiment

import (
	"fmt"
	"strconv"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/model"
)

// applyMechanism sets the attention of mc from a mechanism spec (see
// attention.ParseSpec): a name, then ":key=value" options named like the
// train command's flags without their dashes, as
// "polysketch:learned=true:sketch-size=64". Over the mechanism's defaults
// it first sets blocks of min(64, context), the size the experiments'
// short contexts cross several times; the spec's own options come last.
// An unknown name or option, or an invalid value, is an error of one line.
func applyMechanism(mc *model.Config, spec string) error {
	cfg, err := attention.ParseSpecFrom(spec, func(cfg attention.Config) (attention.Config, error) {
		if c, err := attention.Set(cfg, "block", strconv.Itoa(min(64, mc.Context))); err == nil {
			cfg = c
		}
		return cfg, nil
	})
	if err != nil {
		return fmt.Errorf("mechanism %q: %w", spec, err)
	}
	mc.Attention = cfg
	return nil
}
