package sim

// A small SVG line-chart writer for the soak's figures: panels stacked
// vertically, each with its own y axis, sharing the x axis (time).

import (
	"encoding/xml"
	"fmt"
	"html"
	"math"
	"strings"
	"testing"
)

type series struct {
	Name string
	X, Y []float64
}

type panel struct {
	Title, Unit string
	Series      []series
}

var chartColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

const (
	chartWidth   = 760.0
	panelHeight  = 150.0
	chartLeft    = 70.0
	chartRight   = 20.0
	panelTop     = 28.0
	panelBottom  = 22.0
	chartTitleDY = 30.0
)

// niceTicks returns about n round tick values covering [lo, hi]: the first
// at or below lo, the last at or above hi.
func niceTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Floor(lo/step) * step; ; v += step {
		out = append(out, v)
		if v >= hi-step*1e-9 {
			return out
		}
	}
}

func fmtTick(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	default:
		return fmt.Sprintf("%.4g", v)
	}
}

// lineChart draws the panels over a shared x axis labelled xLabel.
func lineChart(title, xLabel string, panels []panel) string {
	h := chartTitleDY + float64(len(panels))*(panelTop+panelHeight+panelBottom) + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n",
		chartWidth, h, chartWidth, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", chartLeft, html.EscapeString(title))
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, p := range panels {
		for _, s := range p.Series {
			for _, x := range s.X {
				xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			}
		}
	}
	if xmax <= xmin {
		xmin, xmax = 0, 1
	}
	plotW := chartWidth - chartLeft - chartRight
	px := func(x float64) float64 { return chartLeft + (x-xmin)/(xmax-xmin)*plotW }
	for i, p := range panels {
		top := chartTitleDY + float64(i)*(panelTop+panelHeight+panelBottom) + panelTop
		ymin, ymax := 0.0, math.Inf(-1)
		for _, s := range p.Series {
			for _, y := range s.Y {
				ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
			}
		}
		if math.IsInf(ymax, -1) || ymax <= ymin {
			ymax = ymin + 1
		}
		yt := niceTicks(ymin, ymax, 4)
		ymin, ymax = yt[0], yt[len(yt)-1]
		py := func(y float64) float64 { return top + panelHeight - (y-ymin)/(ymax-ymin)*panelHeight }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-weight="bold">%s</text>`+"\n", chartLeft, top-8, html.EscapeString(p.Title+" ("+p.Unit+")"))
		for _, v := range yt {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n",
				chartLeft, py(v), chartLeft+plotW, py(v), chartLeft-4, py(v)+4, fmtTick(v))
		}
		for _, v := range niceTicks(xmin, xmax, 8) {
			if v < xmin || v > xmax {
				continue
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
				px(v), top, px(v), top+panelHeight, px(v), top+panelHeight+14, fmtTick(v))
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", chartLeft, top, plotW, panelHeight)
		for j, s := range p.Series {
			color := chartColors[j%len(chartColors)]
			var pts []string
			for k := range s.X {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[k]), py(s.Y[k])))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, strings.Join(pts, " "))
			lx := chartLeft + plotW - 150
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
				lx, top+12+float64(j)*14, lx+16, top+12+float64(j)*14, color, lx+20, top+16+float64(j)*14, html.EscapeString(s.Name))
		}
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", chartLeft+plotW/2, h-6, html.EscapeString(xLabel))
	b.WriteString("</svg>\n")
	return b.String()
}

// TestLineChart: the chart is well-formed XML with one polyline per series,
// each with a point per sample, within the drawing.
func TestLineChart(t *testing.T) {
	svg := lineChart("t <&>", "seconds", []panel{
		{Title: "a", Unit: "MB", Series: []series{{Name: "x", X: []float64{0, 1, 2}, Y: []float64{1, 5, 3}},
			{Name: "y", X: []float64{0, 1, 2}, Y: []float64{0, 0, 0}}}},
		{Title: "b", Unit: "n", Series: []series{{Name: "z", X: []float64{0, 2}, Y: []float64{1e6, 2e6}}}},
	})
	dec := xml.NewDecoder(strings.NewReader(svg))
	polylines := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not XML: %v\n%s", err, svg)
			}
			break
		}
		el, ok := tok.(xml.StartElement)
		if !ok || el.Name.Local != "polyline" {
			continue
		}
		polylines++
		for _, a := range el.Attr {
			if a.Name.Local != "points" {
				continue
			}
			pts := strings.Fields(a.Value)
			if len(pts) != 3 && len(pts) != 2 {
				t.Errorf("polyline with %d points: %s", len(pts), a.Value)
			}
			for _, p := range pts {
				var x, y float64
				if _, err := fmt.Sscanf(p, "%f,%f", &x, &y); err != nil || x < chartLeft || x > chartWidth || y < 0 {
					t.Errorf("point %q outside the drawing", p)
				}
			}
		}
	}
	if polylines != 3 {
		t.Errorf("%d polylines, want 3", polylines)
	}
	if got := niceTicks(0, 97, 4); got[0] != 0 || got[len(got)-1] < 97 {
		t.Errorf("ticks %v do not cover [0, 97]", got)
	}
}
