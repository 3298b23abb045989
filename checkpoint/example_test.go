package checkpoint_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/model"
)

// Save a model and load it back: Load checks the files, rebuilds the
// model from the saved configuration and fills in its weights.
func Example() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	cfg := model.DefaultConfig()
	cfg.Layers = 1
	m, err := model.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	c := &checkpoint.Checkpoint{Model: m, State: checkpoint.State{Step: 0, Tokenizer: "byte"}}
	if err := checkpoint.Save(filepath.Join(dir, "ckpt"), c); err != nil {
		log.Fatal(err)
	}

	loaded, err := checkpoint.Load(filepath.Join(dir, "ckpt"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(loaded.Model.Config() == cfg, loaded.State.Tokenizer, len(loaded.Model.Params()) == len(m.Params()))

	// A checkpoint of another width cannot resume this run; Diff names
	// what differs.
	other := cfg
	other.Dim = 128
	fmt.Println(checkpoint.Diff(cfg, other))
	// Output:
	// true byte true
	// [dim: 256 vs 128]
}
