package attention_test

import (
	"fmt"

	"github.com/polysketch/polysketch/attention"
)

// A mechanism is named by a spec: its registry name and the options that
// differ from its defaults.
func ExampleParseSpec() {
	cfg, err := attention.ParseSpec("polysketch:learned=false:sketch-size=64")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", cfg)
	fmt.Println(attention.Spec(cfg))

	_, err = attention.ParseSpec("flash:degree=4")
	fmt.Println(err)
	// Output:
	// {Degree:4 SketchSize:64 Block:256 Local:true Sketch:gaussian Learned:false CumSum:false Remat:false RawQK:false Scale:false Softmax:false Mix:false}
	// polysketch:sketch-size=64
	// spec "flash:degree=4": degree is no option of flash attention: its options are block
}

// ParseSpecFrom lets a caller start a mechanism from its own defaults:
// here blocks of 64, which the spec's own options then override.
func ExampleParseSpecFrom() {
	blocks64 := func(cfg attention.Config) (attention.Config, error) {
		if c, err := attention.Set(cfg, "block", "64"); err == nil {
			return c, nil
		}
		return cfg, nil // a mechanism without blocks
	}
	for _, spec := range []string{"flash", "polysketch:block=32", "softmax", "polysketch:degree=3"} {
		cfg, err := attention.ParseSpecFrom(spec, blocks64)
		if err != nil {
			fmt.Println(err)
			continue
		}
		var changed []string
		for _, o := range attention.Changed(cfg) {
			changed = append(changed, o.Flag+"="+o.Default)
		}
		fmt.Println(attention.Spec(cfg), changed)
	}
	_, err := attention.LookupSpec("nosuch:block=3")
	fmt.Println(err != nil)
	// Output:
	// flash:block=64 [block=64]
	// polysketch:block=32 [block=32]
	// softmax []
	// polysketch attention: degree 3: polynomial weights need an even degree ≥ 2 (2, 4, 8)
	// true
}
