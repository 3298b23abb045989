package chart

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// countColor counts the pixels of img that are exactly c.
func countColor(img image.Image, c color.Color) int {
	r0, g0, b0, _ := c.RGBA()
	n := 0
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if r == r0 && g == g0 && b == b0 {
				n++
			}
		}
	}
	return n
}

func TestWrite(t *testing.T) {
	tests := []struct {
		name string
		x, y Axis
	}{
		{"linear", Axis{Label: "step"}, Axis{Label: "loss"}},
		{"log2 x log10 y", Axis{Label: "context length", Log: 2}, Axis{Label: "µs/token", Log: 10}},
		{"log10 x", Axis{Log: 10}, Axis{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Chart{
				Title: "latency", X: tt.x, Y: tt.y, Width: 12, Height: 8,
				Series: []Series{
					{Name: "softmax", X: []float64{512, 1024, 2048, 4096}, Y: []float64{1, 2, 4, 8}},
					{Name: "polysketch", X: []float64{512, 1024, 2048, 4096, 8192}, Y: []float64{3, 3.1, 2.9, 3, 3}},
				},
			}
			path := filepath.Join(t.TempDir(), "chart.png")
			if err := Write(path, c); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			img, err := png.Decode(f)
			if err != nil {
				t.Fatalf("decoding the written PNG: %v", err)
			}
			// 12 × 8 cm at 96 dpi.
			if b := img.Bounds(); b.Dx() != 454 || b.Dy() != 302 {
				t.Errorf("image is %d×%d pixels, want 454×302", b.Dx(), b.Dy())
			}
			// Both lines are drawn, in their own colors.
			for i := range c.Series {
				if n := countColor(img, Color(i)); n < 50 {
					t.Errorf("series %d: %d pixels of its color, want a drawn line", i, n)
				}
			}
			if n := countColor(img, Color(len(c.Series))); n != 0 {
				t.Errorf("%d pixels of the color of a series that does not exist", n)
			}
		})
	}
}

func TestEmpty(t *testing.T) {
	// A chart with no points (every case skipped, say) is still an image.
	for _, log := range []int{0, 2, 10} {
		c := &Chart{X: Axis{Log: log}, Y: Axis{Log: log}, Series: []Series{{Name: "none"}}}
		var buf bytes.Buffer
		if err := Encode(&buf, c); err != nil {
			t.Fatalf("log %d: %v", log, err)
		}
		if _, err := png.Decode(&buf); err != nil {
			t.Fatalf("log %d: %v", log, err)
		}
	}
	// So is a single point on log axes, which needs a widened range.
	c := &Chart{X: Axis{Log: 2}, Y: Axis{Log: 10}, Series: []Series{{X: []float64{4}, Y: []float64{1}}}}
	if err := Encode(&bytes.Buffer{}, c); err != nil {
		t.Fatal(err)
	}
}

func TestErrors(t *testing.T) {
	nan := func() float64 { var z float64; return z / z }()
	tests := []struct {
		name string
		c    Chart
		want string
	}{
		{"lengths", Chart{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1}}}}, "2 x values, 1 y values"},
		{"nan", Chart{Series: []Series{{Name: "a", X: []float64{1}, Y: []float64{nan}}}}, "not finite"},
		{"log x zero", Chart{X: Axis{Log: 2}, Series: []Series{{Name: "a", X: []float64{0}, Y: []float64{1}}}}, "x = 0"},
		{"log y negative", Chart{Y: Axis{Log: 10}, Series: []Series{{Name: "a", X: []float64{1}, Y: []float64{-1}}}}, "y = -1"},
		{"bad base", Chart{X: Axis{Label: "n", Log: 3}}, "log base 3"},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		path := filepath.Join(dir, "bad.png")
		err := Write(path, &tt.c)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
		if _, statErr := os.Stat(path); statErr == nil {
			t.Errorf("%s: a failed Write left %s", tt.name, path)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed writes left files: %v", entries)
	}
}

func TestPowerTicks(t *testing.T) {
	ticks := powerTicks{base: 2}.Ticks(512, 65536)
	var labels []string
	for _, tk := range ticks {
		labels = append(labels, tk.Label)
	}
	want := "512 1024 2048 4096 8192 16384 32768 65536"
	if got := strings.Join(labels, " "); got != want {
		t.Errorf("log2 ticks over [512, 65536]: %q, want %q", got, want)
	}
	ticks = powerTicks{base: 2}.Ticks(1, 1<<30)
	labeled := 0
	for _, tk := range ticks {
		if tk.Label != "" {
			labeled++
		}
	}
	if labeled > 11 || labeled < 5 || ticks[len(ticks)-1].Value != 1<<30 {
		t.Errorf("log2 ticks over [1, 2^30]: %d labels (want 5 to 11), last %v", labeled, ticks[len(ticks)-1])
	}
}
