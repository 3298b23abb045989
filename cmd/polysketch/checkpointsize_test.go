package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCraftedConfig: a config.json of sizes the weights cannot hold, with
// a manifest recomputed to match, is refused in one line by the commands
// that load checkpoints, not with the runtime's out-of-memory crash.
func TestCraftedConfig(t *testing.T) {
	dir, _ := saveTiny(t, "polysketch", 64)
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["model"].(map[string]any)["dim"] = 2e9
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var man struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
		Files   []struct {
			Name   string `json:"name"`
			Size   int64  `json:"size"`
			SHA256 string `json:"sha256"`
		} `json:"files"`
	}
	mb, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mb, &man); err != nil {
		t.Fatal(err)
	}
	for i := range man.Files {
		if man.Files[i].Name == "config.json" {
			sum := sha256.Sum256(b)
			man.Files[i].Size, man.Files[i].SHA256 = int64(len(b)), hex.EncodeToString(sum[:])
		}
	}
	mb, _ = json.Marshal(man)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), mb, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"generate", "--checkpoint", dir, "--prompt", "a", "--tokens", "2"},
		{"bench", "serve", "--checkpoint", dir, "--clients", "1", "--requests", "1"},
	} {
		_, _, err := runQuiet(t, args...)
		if err == nil || !strings.Contains(err.Error(), "more than the whole model.safetensors") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v; want one line refusing the sizes", args[:2], err)
		}
	}
}
