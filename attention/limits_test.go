package attention

import (
	"strings"
	"testing"
)

// TestOptionLimits: options that size buffers are refused above their
// bound, naming the flag and the bound, so that a crafted config.json
// cannot make New allocate without end.
func TestOptionLimits(t *testing.T) {
	for _, c := range []struct {
		spec, want string
	}{
		{"polysketch:sketch-size=1025", "sketch_size 1025: at most 1024"},
		{"sqpolysketch:sketch-size=257", "sketch_size 257: at most 256"},
		{"performer:features=65537", "features 65537: at most 65536"},
		{"hyper:samples=1048577", "samples 1048577: at most 1048576"},
		{"flash:block=65537", "block 65537: at most 65536"},
		{"polynomial:degree=66", "degree 66: at most 64"},
	} {
		_, err := ParseSpec(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSpec(%q) = %v, want an error containing %q", c.spec, err, c.want)
		}
	}
	for _, spec := range []string{"polysketch:sketch-size=1024", "performer:features=65536", "flash:block=65536", "polynomial:degree=64"} {
		if _, err := ParseSpec(spec); err != nil {
			t.Errorf("ParseSpec(%q) at the bound: %v", spec, err)
		}
	}
}
