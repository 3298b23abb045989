package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
)

// TestMechanismsDoc requires docs/attention.md's table of mechanisms to be
// what `polysketch mechanisms --markdown` prints from the registry.
func TestMechanismsDoc(t *testing.T) {
	readme, err := os.ReadFile("../../docs/attention.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- mechanisms: polysketch mechanisms --markdown -->\n", "<!-- end of mechanisms -->"
	s := string(readme)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("docs/attention.md lacks the markers %q and %q around the table of mechanisms", begin, end)
	}
	var out bytes.Buffer
	if err := run([]string{"mechanisms", "--markdown"}, &out); err != nil {
		t.Fatal(err)
	}
	if got := s[i+len(begin) : j]; got != out.String() {
		t.Errorf("docs/attention.md's table of mechanisms is not the registry's; replace it with the output of `go run ./cmd/polysketch mechanisms --markdown`:\n%s", out.String())
	}
}

func TestMechanismsList(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"mechanisms"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, name := range attention.Names() {
		if !strings.Contains(out.String(), "  "+name+" ") {
			t.Errorf("mechanisms does not list %s:\n%s", name, out.String())
		}
	}
}
