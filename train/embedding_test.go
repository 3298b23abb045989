package train

import (
	"fmt"
	"strings"
	"testing"
)

// TestNewRefusesIDsBeyondEmbedding checks that a run never starts on
// tokens whose ids the model's embedding cannot hold: byte tokens (ids up
// to 255) for a model of 128 ids; nor on tokens of a smaller vocabulary
// than the model's 300, a sign of the wrong tokenizer.
func TestNewRefusesIDsBeyondEmbedding(t *testing.T) {
	for _, vocab := range []int{128, 300} {
		mc := tinyModel()
		mc.Vocab = vocab
		_, err := startNew(t, t.TempDir(), mc, tinyTrain())
		want := fmt.Sprintf("holds byte tokens (vocabulary 256); the run needs byte tokens for a model of vocabulary %d", vocab)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("model of %d ids on byte tokens: %v, want %q", vocab, err, want)
		}
	}
}
