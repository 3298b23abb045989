package task

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestOptionsSpec(t *testing.T) {
	file := filepath.Join(t.TempDir(), "t.jsonl")
	lines := strings.Repeat(`{"input": "abc=", "target": "cba"}`+"\n", 30)
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		o      Options
		length int
		want   *Spec // nil for no task
		err    string
	}{
		{"none", Options{}, 0, nil, ""},
		{"defaults", Options{Name: MQAR}, 0, &Spec{Name: MQAR, Length: 128, Vocab: 256, Count: 8, Test: 512, Seed: 7}, ""},
		{"sizes given", Options{Name: MQAR, Vocab: 64, Count: 4, Train: 100, Test: 50}, 64,
			&Spec{Name: MQAR, Length: 64, Vocab: 64, Count: 4, Train: 100, Test: 50, Seed: 7}, ""},
		{"reversal digits fit the length", Options{Name: Reversal}, 40, &Spec{Name: Reversal, Length: 40, Vocab: 10, Count: 20, Test: 512, Seed: 7}, ""},
		{"encoder as long as its digits", Options{Name: Reversal, Count: 12, Bidirectional: true}, 0,
			&Spec{Name: Reversal, Length: 12, Vocab: 10, Count: 12, Test: 512, Seed: 7, Bidirectional: true}, ""},
		{"file: longest example (input and target but the last token), a tenth tested", Options{Name: file}, 0, &Spec{Name: File, Path: file, Length: 6, Test: 3, Seed: 7}, ""},
		{"unknown", Options{Name: "no-such-task"}, 0, nil, `unknown task "no-such-task"`},
		{"invalid", Options{Name: MQAR, Count: 1000}, 0, nil, "distinct keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.o.Spec(tt.length, 7, "byte")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Spec: %v, want an error containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s, tt.want) {
				t.Fatalf("Spec: %+v, want %+v", s, tt.want)
			}
			if s == nil {
				return
			}
			again, err := s.Options().Spec(s.Length, s.Seed, "byte")
			if err != nil || !reflect.DeepEqual(again, s) {
				t.Errorf("Spec of its own Options: %+v, %v; want %+v", again, err, s)
			}
		})
	}
}
