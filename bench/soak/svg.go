package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Plot geometry, in SVG user units.
const (
	plotW, plotH                   = 640, 240
	padL, padR, padT, padB         = 64, 16, 28, 36
	innerW, innerH                 = plotW - padL - padR, plotH - padT - padB
	plotMinSpan            float64 = 1e-9
)

// writeSVG draws s as a line over the run, with the fitted line of its
// second half dashed, to w: a hand-written SVG, standard library only.
func writeSVG(w io.Writer, s series, title string) error {
	xmin, xmax, ymin, ymax := bounds(s.values)
	sx := func(x float64) float64 { return padL + (x-xmin)/(xmax-xmin)*innerW }
	sy := func(y float64) float64 { return padT + innerH - (y-ymin)/(ymax-ymin)*innerH }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", plotW, plotH, plotW, plotH)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13">%s</text>`+"\n", padL, escape(title))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", padL, padT, innerW, innerH)
	// Axis labels: the y range and the run's length in minutes.
	fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-4, sy(ymax)+4, num(ymax))
	fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-4, sy(ymin)+4, num(ymin))
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" transform="rotate(-90 12 %d)">%s</text>`+"\n", 12, padT+innerH/2, padT+innerH/2, escape(s.unit))
	fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", padL, plotH-8, num(xmin*60)+" min")
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", padL+innerW, plotH-8, num(xmax*60)+" min")
	if len(s.values) > 0 {
		b.WriteString(`<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="`)
		for i, p := range s.values {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", sx(p.x), sy(p.y))
		}
		b.WriteString(`"/>` + "\n")
		faulty, quiet := windows(s.values, s.quietFrom)
		for _, part := range [][]point{faulty, quiet} {
			if len(part) < 2 {
				continue
			}
			m, c := fit(medians(part))
			x0, x1 := part[0].x, part[len(part)-1].x
			y0, y1 := clamp(m*x0+c, ymin, ymax), clamp(m*x1+c, ymin, ymax)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d62728" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", sx(x0), sy(y0), sx(x1), sy(y1))
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// bounds returns the ranges of pts, widened so that neither is empty and
// the y range starts at 0 for a series that never goes negative.
func bounds(pts []point) (xmin, xmax, ymin, ymax float64) {
	if len(pts) == 0 {
		return 0, 1, 0, 1
	}
	xmin, xmax, ymin, ymax = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		xmin, xmax = math.Min(xmin, p.x), math.Max(xmax, p.x)
		ymin, ymax = math.Min(ymin, p.y), math.Max(ymax, p.y)
	}
	if ymin > 0 {
		ymin = 0
	}
	if xmax-xmin < plotMinSpan {
		xmax = xmin + 1
	}
	if ymax-ymin < plotMinSpan {
		ymax = ymin + 1
	}
	ymax += (ymax - ymin) * 0.05
	return xmin, xmax, ymin, ymax
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// num formats v briefly.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// escape escapes text for an SVG text node.
func escape(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}
