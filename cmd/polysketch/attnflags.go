package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/polysketch/polysketch/attention"
)

// attentionFlags is the attention flag group every command shares,
// generated from the attention registry: --attention names the mechanism
// (or, for the commands that compare mechanisms, a comma-separated list
// of specs such as "flash,polysketch:learned=false"), and every option of
// every registered mechanism is a flag of its own (--degree, --block,
// --sketch-size, …), which applies to the chosen mechanism and is an
// error for a mechanism that does not have it.
type attentionFlags struct {
	list  bool     // --attention takes several specs
	specs []string // --attention as given; nil when not given
	opts  []optionValue
}

// optionValue is one mechanism option given on the command line.
type optionValue struct{ name, value string }

// register defines --attention and the option flags on fs. def is
// what --attention means when not given, for the help text; if it is one
// spec, its options are the defaults the help gives for its mechanism.
func (a *attentionFlags) register(fs *flag.FlagSet, def string, list bool) {
	a.list = list
	usage := "attention mechanism: " + strings.Join(attention.Names(), ", ") + "; its options as flags (see the list of mechanisms below)"
	if list {
		usage = "comma-separated attention mechanisms, each a name or a spec name:option=value:… (" + strings.Join(attention.Names(), ", ") + ")"
	}
	fs.Func("attention", usage+" (default "+def+")", func(s string) error {
		a.specs = nil
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" {
				a.specs = append(a.specs, f)
			}
		}
		if len(a.specs) == 0 || (!list && len(a.specs) > 1) {
			return fmt.Errorf("want one mechanism of %s", strings.Join(attention.Names(), ", "))
		}
		for _, spec := range a.specs {
			if _, err := attention.LookupSpec(spec); err != nil {
				return err
			}
		}
		return nil
	})
	var base attention.Config
	if !list {
		base, _ = attention.ParseSpec(def) // nil for "the checkpoint's"
	}
	for _, o := range allOptions(base) {
		set := func(s string) error {
			a.opts = append(a.opts, optionValue{o.Name, s})
			return nil
		}
		help := o.Help + " (" + o.owners + ")"
		if o.Bool {
			fs.BoolFunc(o.Flag, help, set)
		} else {
			fs.Func(o.Flag, help, set)
		}
	}
}

// option is an option of one or more mechanisms, with who has it.
type option struct {
	attention.Option
	owners string // "polysketch, default 256; flash, default 256"
}

// allOptions returns the options of every registered mechanism, once per
// name, in registry order, with their defaults: base's values for base's
// mechanism, if base is not nil.
func allOptions(base attention.Config) []option {
	var opts []option
	index := map[string]int{}
	for _, e := range attention.Entries() {
		for _, o := range attention.OptionsOf(defaults(e, base)) {
			owner := e.Name + " default " + o.Default
			if i, ok := index[o.Name]; ok {
				opts[i].owners += "; " + owner
				continue
			}
			index[o.Name] = len(opts)
			opts = append(opts, option{o, owner})
		}
	}
	return opts
}

// given reports whether any attention flag was given.
func (a *attentionFlags) given() bool { return a.specs != nil || len(a.opts) > 0 }

// apply returns the configuration the flags describe over base: base
// itself when --attention is not given or names base's mechanism, else
// the defaults of the named mechanism; then the option flags, then the
// spec's own options. An option the mechanism does not have is an error
// naming the ones it has.
func (a *attentionFlags) apply(base attention.Config) (attention.Config, error) {
	if len(a.specs) == 0 {
		if base == nil {
			return nil, errors.New("no attention mechanism: give --attention")
		}
		cfg, err := attention.ParseSpecFrom(base.Mechanism(), func(attention.Config) (attention.Config, error) {
			return a.options(base, true)
		})
		if err != nil {
			return nil, err
		}
		return cfg, nil
	}
	return a.parse(a.specs[0], func(d attention.Config) (attention.Config, error) {
		if base != nil && base.Mechanism() == d.Mechanism() {
			d = base
		}
		return a.options(d, true)
	})
}

// configs returns the mechanisms of a list-taking --attention (defs when
// not given), each from its defaults, with the option flags that apply to
// it and then its spec's own options; with their specs as labels. An
// option flag that applies to none of them is an error.
func (a *attentionFlags) configs(defs []string) ([]attention.Config, []string, error) {
	specs := a.specs
	if specs == nil {
		specs = defs
	}
	var cfgs []attention.Config
	used := map[string]bool{}
	for _, spec := range specs {
		cfg, err := a.parse(spec, func(d attention.Config) (attention.Config, error) { return a.options(d, false) })
		if err != nil {
			return nil, nil, err
		}
		for _, o := range attention.OptionsOf(cfg) {
			used[o.Name] = true
		}
		cfgs = append(cfgs, cfg)
	}
	for _, o := range a.opts {
		if !used[o.name] {
			return nil, nil, fmt.Errorf("--%s is no option of %s", strings.ReplaceAll(o.name, "_", "-"), strings.Join(specs, ", "))
		}
	}
	return cfgs, specs, nil
}

// parse parses one spec of --attention over start.
func (a *attentionFlags) parse(spec string, start func(attention.Config) (attention.Config, error)) (attention.Config, error) {
	cfg, err := attention.ParseSpecFrom(spec, start)
	if err != nil {
		return nil, fmt.Errorf("--attention %s: %w", spec, err)
	}
	return cfg, nil
}

// options applies the option flags to cfg: all of them, or with strict
// unset only those cfg's mechanism has.
func (a *attentionFlags) options(cfg attention.Config, strict bool) (attention.Config, error) {
	have := map[string]bool{}
	for _, o := range attention.OptionsOf(cfg) {
		have[o.Name] = true
	}
	var err error
	for _, o := range a.opts {
		if !strict && !have[o.name] {
			continue
		}
		if cfg, err = attention.Set(cfg, o.name, o.value); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// checkSame refuses flags that would change the attention of a
// checkpoint: eval and generate run the model as it was trained.
func (a *attentionFlags) checkSame(saved attention.Config) error {
	if !a.given() {
		return nil
	}
	cfg, err := a.apply(saved)
	if err != nil {
		return err
	}
	if cfg == saved {
		return nil
	}
	if cfg.Mechanism() != saved.Mechanism() {
		return fmt.Errorf("--attention %s: the checkpoint was trained with %s attention; drop the attention flags", cfg.Mechanism(), saved.Mechanism())
	}
	var diffs []string
	was := attention.OptionsOf(saved)
	for i, o := range attention.OptionsOf(cfg) {
		if o.Default != was[i].Default {
			diffs = append(diffs, fmt.Sprintf("--%s %s where the checkpoint has %s", o.Flag, o.Default, was[i].Default))
		}
	}
	return fmt.Errorf("%s: the checkpoint's %s attention differs; drop those flags", strings.Join(diffs, ", "), saved.Mechanism())
}

// describeAttention names cfg's mechanism and the options that differ
// from its defaults: "polysketch attention (block=8, learned=true)".
func describeAttention(cfg attention.Config) string {
	var opts []string
	for _, o := range attention.Changed(cfg) {
		opts = append(opts, o.Flag+"="+o.Default)
	}
	s := cfg.Mechanism() + " attention"
	if len(opts) > 0 {
		s += " (" + strings.Join(opts, ", ") + ")"
	}
	return s
}

// defaults returns the configuration of e's mechanism that a command
// starts from: base if it is of that mechanism, else the mechanism's own
// defaults.
func defaults(e attention.Entry, base attention.Config) attention.Config {
	if base != nil && base.Mechanism() == e.Name {
		return base
	}
	return e.Default()
}

// mechanismList returns printMechanisms for base, to end a command's help.
func mechanismList(base attention.Config) func(io.Writer) {
	return func(w io.Writer) { printMechanisms(w, base) }
}

// printMechanisms writes the list of mechanisms and their options, for
// the -h of every command that takes attention flags. A command whose
// default attention, base, sets options of its mechanism passes it, so
// that the list shows the defaults the command uses.
func printMechanisms(w io.Writer, b attention.Config) {
	fmt.Fprintln(w, "\nattention mechanisms (--attention NAME) and their options:")
	for _, e := range attention.Entries() {
		fmt.Fprintf(w, "  %-11s %s\n", e.Name, e.Summary)
		opts := attention.OptionsOf(defaults(e, b))
		if len(opts) == 0 {
			fmt.Fprintf(w, "  %-11s   (no options)\n", "")
		}
		own := attention.OptionsOf(e.Default())
		for i, o := range opts {
			note := ""
			if o.Default != own[i].Default {
				note = fmt.Sprintf(" (%s's own default: %s)", e.Name, own[i].Default)
			}
			fmt.Fprintf(w, "  %-11s   --%s=%s  %s%s\n", "", o.Flag, o.Default, o.Help, note)
		}
	}
}
