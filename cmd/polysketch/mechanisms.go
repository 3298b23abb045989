package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/polysketch/polysketch/attention"
)

// runMechanisms implements "polysketch mechanisms": the attention registry
// as a table, docs/attention.md's table of mechanisms with --markdown.
func runMechanisms(args []string, stdout io.Writer) error {
	fs := newFlags("mechanisms", "usage: polysketch mechanisms [--markdown]\n\nLists the attention mechanisms: what each computes, its cost, its options\nwith their defaults, and its properties.\n\nflags:\n", stdout)
	markdown := fs.Bool("markdown", false, "print the table in Markdown, as docs/attention.md has it")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *markdown {
		_, err := io.WriteString(stdout, mechanismTable())
		return err
	}
	printMechanisms(stdout, nil)
	return nil
}

// mechanismTable returns the registry as the Markdown table of docs/attention.md
// (checked against it by a test, so that the two cannot drift).
func mechanismTable() string {
	yes := func(b bool, y, n string) string {
		if b {
			return y
		}
		return n
	}
	var b strings.Builder
	b.WriteString("| `--attention` | computes | cost per head | options (defaults) | time in N | trainable | decoder |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, e := range attention.Entries() {
		var opts []string
		for _, o := range attention.OptionsOf(e.Default()) {
			opts = append(opts, fmt.Sprintf("`--%s=%s`", o.Flag, o.Default))
		}
		if len(opts) == 0 {
			opts = []string{"none"}
		}
		decoder := "KV cache, up to the context trained on"
		if e.Recurrent {
			decoder = "constant-size state"
		} else if !e.ContextLimit {
			decoder = "KV cache"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", e.Name, e.Summary, e.Cost, strings.Join(opts, " "),
			yes(e.Linear, "linear", "quadratic"), yes(e.Trainable, "yes", "no"), decoder)
	}
	return b.String()
}
