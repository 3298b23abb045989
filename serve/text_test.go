package serve

import (
	"strings"
	"testing"
)

func TestTextStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stop   []string
		pieces []string
		want   []string // shown after each piece; the last entry also gets flush
		done   bool
	}{
		{"plain", nil, []string{"ab", "c"}, []string{"ab", "c"}, false},
		{"stop", []string{"END"}, []string{"abE", "N", "Dxyz"}, []string{"ab", "", ""}, true},
		{"not a stop", []string{"END"}, []string{"abE", "Nx"}, []string{"ab", "ENx"}, false},
		{"earliest stop", []string{"cd", "b"}, []string{"abcd"}, []string{"a"}, true},
		{"utf-8 split", nil, []string{"a\xc3", "\xa9b", "\xe2\x82", "\xac"}, []string{"a", "éb", "", "€"}, false},
		{"invalid byte", nil, []string{"a\xff", "b"}, []string{"a\uFFFD", "b"}, false},
		{"unfinished at the end", nil, []string{"a\xe2\x82"}, []string{"a\uFFFD\uFFFD"}, false},
		{"stop after multibyte", []string{"é!"}, []string{"x\xc3", "\xa9", "!"}, []string{"x", "", ""}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTextStream(tc.stop)
			var done bool
			for i, p := range tc.pieces {
				got, stop := ts.add([]byte(p))
				if i == len(tc.pieces)-1 && !stop {
					got += ts.flush()
				}
				if got != tc.want[i] {
					t.Errorf("piece %d %q: shows %q, want %q", i, p, got, tc.want[i])
				}
				if stop {
					done = true
					break
				}
			}
			if done != tc.done {
				t.Errorf("stopped %v, want %v", done, tc.done)
			}
		})
	}
}

// TestTextStreamPieces checks that any cut of a text into pieces shows
// the same text as the whole, with and without a stop string.
func TestTextStreamPieces(t *testing.T) {
	text := "héllo, wörld\xff€ and so on END tail"
	for _, stop := range [][]string{nil, {"END"}, {"wö"}} {
		whole := newTextStream(stop)
		want, _ := whole.add([]byte(text))
		want += whole.flush()
		for cut := 1; cut < 5; cut++ {
			ts := newTextStream(stop)
			var got strings.Builder
			stopped := false
			for i := 0; i < len(text) && !stopped; i += cut {
				s, st := ts.add([]byte(text[i:min(i+cut, len(text))]))
				got.WriteString(s)
				stopped = st
			}
			if !stopped {
				got.WriteString(ts.flush())
			}
			if got.String() != want {
				t.Errorf("stop %q, pieces of %d: %q, whole %q", stop, cut, got.String(), want)
			}
		}
	}
}
