package hf

import (
	"encoding/json"
	"flag"
	"testing"
)

var (
	shapeName = flag.String("shape", "smollm2-135m", "TestShapeCheckpoint: the named shape to write")
	shapeDir  = flag.String("shape-dir", "", "TestShapeCheckpoint: write the whole shape here, as bf16 shards, for the import benchmark (docs/import.md)")
)

// TestShapeCheckpoint writes a checkpoint of a named shape as transformers
// would lay it out, in bf16 shards of random weights, and imports it. By
// default the shape keeps its widths and loses all but two layers; with
// -shape-dir it is written whole there, and not read: the directory the
// import benchmark of docs/import.md times.
//
//	go test ./hf -run TestShapeCheckpoint -args -shape smollm2-135m -shape-dir /tmp/smollm2
func TestShapeCheckpoint(t *testing.T) {
	b, err := ShapeJSON(*shapeName)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	json.Unmarshal(b, &cfg)
	if *shapeDir != "" {
		writeCheckpoint(t, *shapeDir, cfg, "BF16", 3, 1)
		return
	}
	for _, k := range []string{"num_hidden_layers", "n_layer"} {
		if _, ok := cfg[k]; ok {
			cfg[k] = 2
		}
	}
	dir := t.TempDir()
	writeCheckpoint(t, dir, cfg, "BF16", 3, 1)
	imp, err := Read(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Shape(*shapeName, Options{})
	got := imp.Model.Config()
	if got.Dim != want.Model.Dim || got.Vocab != want.Model.Vocab || got.KVHeads != want.Model.KVHeads || imp.DTypes["BF16"] == 0 {
		t.Errorf("imported %+v from BF16 %d tensors, want the widths of %+v", got, imp.DTypes["BF16"], want.Model)
	}
}
