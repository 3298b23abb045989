package experiment

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/model"
)

// applyMechanism sets the attention of mc from a mechanism spec: a name,
// then ":key=value" options named like the train command's flags without
// their dashes, as "polysketch:learned=true:local=true:sketch-size=64".
// Options not given keep mc's values, except learned, which is false
// unless given. An unknown name or option is an error of one line.
//
// The attention registry, when it lands, replaces this body with its
// parser; until then it maps specs onto model.Config's fields.
func applyMechanism(mc *model.Config, spec string) error {
	name, opts, _ := strings.Cut(spec, ":")
	if !slices.Contains(attention.Kinds, attention.Kind(name)) {
		return fmt.Errorf("mechanism %q: unknown attention %q: use one of %v", spec, name, attention.Kinds)
	}
	mc.Attention = attention.Kind(name)
	mc.Learned = false
	if opts == "" {
		return nil
	}
	for kv := range strings.SplitSeq(opts, ":") {
		key, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("mechanism %q: option %q: want key=value", spec, kv)
		}
		var err error
		switch key {
		case "degree":
			mc.Degree, err = strconv.Atoi(val)
		case "sketch-size":
			mc.SketchSize, err = strconv.Atoi(val)
		case "block":
			mc.Block, err = strconv.Atoi(val)
		case "local":
			mc.Local, err = strconv.ParseBool(val)
		case "learned":
			mc.Learned, err = strconv.ParseBool(val)
		case "sketch":
			mc.Sketch = attention.SketchKind(val)
		default:
			return fmt.Errorf("mechanism %q: unknown option %q: use degree, sketch-size, block, local, learned or sketch", spec, key)
		}
		if err != nil {
			return fmt.Errorf("mechanism %q: option %s: %q is not a valid value", spec, key, val)
		}
	}
	return nil
}
