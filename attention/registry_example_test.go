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
	// {Degree:4 SketchSize:64 Block:256 Local:true Sketch:gaussian Learned:false CumSum:false Remat:false}
	// polysketch:sketch-size=64
	// spec "flash:degree=4": --degree is no option of flash attention: its options are --block
}
