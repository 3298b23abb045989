package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/hf"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/train"
)

// gpt2Small is the shape of the project's own architecture and attention
// at GPT-2 small's size: 12 layers, d 768, 12 heads of 64.
const gpt2Small = "gpt2-small"

// shapeHelp is the help of --shape.
func shapeHelp() string {
	return "model of a named shape with random weights: " + strings.Join(shapeNames(), ", ") +
		" (" + gpt2Small + ": the default architecture and attention at 12 layers, d 768, 12 heads of 64; the others as published, with their vocabulary and grouped-query heads); or a checkpoint directory, such as an imported model"
}

func shapeNames() []string { return append([]string{gpt2Small}, hf.Shapes()...) }

// shapeFlag defines --shape on fs.
func shapeFlag(fs *flag.FlagSet) *string { return fs.String("shape", "", shapeHelp()) }

// benchShape returns the model configuration --shape names: a named
// shape, or the model of a checkpoint directory; named reports whether
// the shape has its own vocabulary (all but gpt2-small).
func benchShape(arg string) (mc model.Config, vocab bool, err error) {
	switch {
	case arg == gpt2Small:
		mc = model.DefaultConfig()
		mc.Layers, mc.Dim, mc.Heads = 12, 768, 12
		return mc, false, nil
	case strings.Contains(arg, string(os.PathSeparator)) || checkpoint.Exists(train.CheckpointIn(arg)):
		c, err := train.Open(arg)
		if err != nil {
			return mc, false, err
		}
		return c.Model.Config(), true, nil
	}
	c, err := hf.Shape(arg, hf.Options{})
	if err != nil {
		return mc, false, fmt.Errorf("--shape %s: not a checkpoint, and %s", arg, strings.Replace(err.Error(), "the shapes are ", "the shapes are "+gpt2Small+", ", 1))
	}
	return c.Model, true, nil
}

// applyShape sets mc from --shape, refusing the shape flags beside it.
func applyShape(fs *flag.FlagSet, arg string, mc *model.Config) (vocab bool, err error) {
	var clash []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "layers", "dim", "heads":
			clash = append(clash, "--"+f.Name)
		}
	})
	if len(clash) > 0 {
		return false, errors.New("--shape and " + strings.Join(clash, ", ") + ": the shape sets the model's size; give one or the other")
	}
	if *mc, vocab, err = benchShape(arg); err != nil {
		return false, err
	}
	return vocab, nil
}

// isSet reports whether the flag name was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
