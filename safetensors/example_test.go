package safetensors_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/polysketch/polysketch/safetensors"
	"github.com/polysketch/polysketch/tensor"
)

// Write a file that Python reads with safetensors.numpy.load_file, and read
// it back.
func Example() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "weights.safetensors")

	weights := map[string]*tensor.Tensor{
		"embed": tensor.From([]float32{1, 2, 3, 4, 5, 6}, 3, 2),
		"bias":  tensor.From([]float32{0.5, -0.5}, 2),
	}
	if err := safetensors.Write(path, weights, map[string]string{"step": "100"}); err != nil {
		log.Fatal(err)
	}

	tensors, metadata, err := safetensors.Read(path, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tensors["embed"].Shape, tensors["embed"].Data)
	fmt.Println(tensors["bias"].Data, metadata["step"])
	// Output:
	// [3 2] [1 2 3 4 5 6]
	// [0.5 -0.5] 100
}
