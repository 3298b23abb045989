// Package chart draws line charts as PNG images: named series of (x, y)
// points, a title, axis labels, and optional logarithmic axes. It serves
// the benchmarks (latency against context length) and training (loss
// against step); drawing is done by gonum.org/v1/plot.
package chart

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"github.com/polysketch/polysketch/internal/atomicfile"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Chart is a line chart. The zero value of each field is a sensible
// default: linear axes, 16×10 cm.
type Chart struct {
	Title  string
	X, Y   Axis
	Series []Series
	// Width and Height of the image in centimetres (at 96 dpi, 1 cm is
	// about 38 pixels); a zero Width means 16 for the axes plus what the
	// legend needs, a zero Height 10.
	Width, Height float64
}

// Axis is one axis of a chart.
type Axis struct {
	Label string
	// Log is the base of a logarithmic axis (2 or 10), or 0 for a linear
	// one. Ticks fall on powers of the base.
	Log int
}

// Series is one line: the points (X[i], Y[i]), drawn in order, with a
// marker on each and Name in the legend.
type Series struct {
	Name string
	X, Y []float64
}

// Write draws c as a PNG image into the file at path, through a temporary
// file renamed into place, so that a failure leaves no partial image.
func Write(path string, c *Chart) error {
	if err := atomicfile.Write(path, func(w io.Writer) error { return c.encode(w) }); err != nil {
		return fmt.Errorf("chart: %s: %w", path, err)
	}
	return nil
}

// Encode draws c as a PNG image to w.
func Encode(w io.Writer, c *Chart) error {
	if err := c.encode(w); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

func (c *Chart) encode(w io.Writer) error {
	p, legend, err := c.plot()
	if err != nil {
		return err
	}
	width, height := vg.Length(c.Width)*vg.Centimeter, vg.Length(c.Height)*vg.Centimeter
	if height <= 0 {
		height = 10 * vg.Centimeter
	}
	gap := vg.Points(6)
	if width <= 0 {
		// The axes get 16 cm and the legend the room it needs beside
		// them, so that long series names do not squeeze the data.
		width = 16 * vg.Centimeter
		probe, err := draw.NewFormattedCanvas(width, height, "png")
		if err != nil {
			return err
		}
		if r := legend.Rectangle(draw.New(probe)); r.Max.X > r.Min.X {
			width += r.Max.X - r.Min.X + 2*gap
		}
	}
	canvas, err := draw.NewFormattedCanvas(width, height, "png")
	if err != nil {
		return err
	}
	dc := draw.New(canvas)
	// The legend goes to the right of the axes, where it cannot hide data.
	r := legend.Rectangle(dc)
	if lw := r.Max.X - r.Min.X; lw > 0 {
		p.Draw(draw.Crop(dc, 0, -(lw + 2*gap), 0, 0))
		top := vg.Length(0)
		if p.Title.Text != "" {
			top = p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding
		}
		legend.Draw(draw.Crop(dc, dc.Max.X-dc.Min.X-lw-gap, 0, 0, -top))
	} else {
		p.Draw(dc)
	}
	_, err = canvas.WriteTo(w)
	return err
}

// plot validates c and builds the gonum plot and its legend.
func (c *Chart) plot() (*plot.Plot, *plot.Legend, error) {
	for _, a := range []Axis{c.X, c.Y} {
		if a.Log != 0 && a.Log != 2 && a.Log != 10 {
			return nil, nil, fmt.Errorf("axis %q: log base %d, want 0 (linear), 2 or 10", a.Label, a.Log)
		}
	}
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.X.Label
	p.Y.Label.Text = c.Y.Label
	p.Add(plotter.NewGrid())
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true

	// Log axes need a positive range even when there is no data or a
	// single value, which gonum would widen to include zero.
	xr, yr := newRange(), newRange()
	for i, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return nil, nil, fmt.Errorf("series %q: %d x values, %d y values", s.Name, len(s.X), len(s.Y))
		}
		xys := make(plotter.XYs, len(s.X))
		for j := range s.X {
			x, y := s.X[j], s.Y[j]
			switch {
			case math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0):
				return nil, nil, fmt.Errorf("series %q: point %d (%v, %v) is not finite", s.Name, j, x, y)
			case c.X.Log != 0 && x <= 0:
				return nil, nil, fmt.Errorf("series %q: point %d has x = %v, which a log axis cannot show", s.Name, j, x)
			case c.Y.Log != 0 && y <= 0:
				return nil, nil, fmt.Errorf("series %q: point %d has y = %v, which a log axis cannot show", s.Name, j, y)
			}
			xys[j] = plotter.XY{X: x, Y: y}
			xr.add(x)
			yr.add(y)
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, nil, fmt.Errorf("series %q: %w", s.Name, err)
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		// Past the palette the colors repeat: dashes and another glyph
		// tell those series apart.
		line.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
		points.Color = plotutil.Color(i)
		points.Shape = plotutil.Shape(i / len(plotutil.DefaultColors))
		p.Add(line, points)
		if s.Name != "" {
			legend.Add(s.Name, line, points)
		}
	}
	setAxis(&p.X, c.X.Log, xr)
	setAxis(&p.Y, c.Y.Log, yr)
	return p, &legend, nil
}

type valueRange struct{ min, max float64 }

func newRange() valueRange { return valueRange{math.Inf(1), math.Inf(-1)} }

func (r *valueRange) add(v float64) {
	r.min = math.Min(r.min, v)
	r.max = math.Max(r.max, v)
}

// setAxis makes a an axis of the given log base (0: linear) over r.
func setAxis(a *plot.Axis, base int, r valueRange) {
	if base == 0 {
		return // gonum's defaults handle linear axes, empty or not
	}
	b := float64(base)
	switch {
	case r.min > r.max: // no data
		r.min, r.max = 1, b
	case r.min == r.max:
		r.min, r.max = r.min/b, r.max*b
	}
	a.Min, a.Max = r.min, r.max
	a.Scale = plot.LogScale{}
	a.Tick.Marker = powerTicks{base: b}
}

// powerTicks puts major ticks on powers of base, thinned to at most about
// ten labels, with minor ticks between them for base 10 (labeled at 2 and 5
// when the axis spans at most two decades).
type powerTicks struct{ base float64 }

func (t powerTicks) Ticks(min, max float64) []plot.Tick {
	lo := math.Floor(math.Log(min)/math.Log(t.base) + 1e-9)
	hi := math.Ceil(math.Log(max)/math.Log(t.base) - 1e-9)
	step := math.Max(1, math.Ceil((hi-lo+1)/10))
	var ticks []plot.Tick
	for e := lo; e <= hi; e++ {
		v := math.Pow(t.base, e)
		label := ""
		if math.Mod(e-lo, step) == 0 {
			label = formatPower(t.base, e, v)
		}
		if v >= min*(1-1e-9) && v <= max*(1+1e-9) {
			ticks = append(ticks, plot.Tick{Value: v, Label: label})
		}
		if t.base == 10 && step == 1 {
			for m := 2.0; m < 10; m++ {
				if mv := m * v; mv >= min && mv <= max {
					tick := plot.Tick{Value: mv}
					if hi-lo <= 2 && (m == 2 || m == 5) {
						// Few decades: label 2 and 5 too, or there
						// may be one label or none.
						tick.Label = formatPower(10, e, mv)
					}
					ticks = append(ticks, tick)
				}
			}
		}
	}
	return ticks
}

// formatPower labels v, a multiple of base^e: plainly while that is short
// (512, 0.002), otherwise as a power (2^20, 1e+09).
func formatPower(base, e, v float64) string {
	if s := strconv.FormatFloat(v, 'f', -1, 64); len(s) <= 6 {
		return s
	}
	if base == 2 {
		return "2^" + strconv.Itoa(int(e))
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Color returns the color of series i, for callers that draw matching
// legends or tables.
func Color(i int) color.Color { return plotutil.Color(i) }
