package main

import (
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// svgDoc parses an SVG and returns its polyline's points and its lines.
func svgDoc(t *testing.T, doc string) (poly [][2]float64, lines int, texts []string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	d.Strict = true
	var inText bool
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "valid XML")
		switch e := tok.(type) {
		case xml.StartElement:
			inText = e.Name.Local == "text"
			switch e.Name.Local {
			case "polyline":
				for _, a := range e.Attr {
					if a.Name.Local != "points" {
						continue
					}
					for _, p := range strings.Fields(a.Value) {
						x, y, ok := strings.Cut(p, ",")
						require.True(t, ok, p)
						fx, err1 := strconv.ParseFloat(x, 64)
						fy, err2 := strconv.ParseFloat(y, 64)
						require.NoError(t, errors.Join(err1, err2))
						poly = append(poly, [2]float64{fx, fy})
					}
				}
			case "line":
				lines++
			}
		case xml.CharData:
			if inText {
				texts = append(texts, string(e))
			}
		case xml.EndElement:
			inText = false
		}
	}
	return poly, lines, texts
}

func TestSVGPointsInRange(t *testing.T) {
	for name, pts := range map[string][]point{
		"growing":  line(100, 1, 10, 5, 1, 1),
		"negative": line(50, 0.5, -3, 1, 0.5, 2),
		"flat":     line(20, 1, 7, 0, 0, 1),
		"huge":     line(3, 1, 1e12, 1e12, 0, 1),
	} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			require.NoError(t, writeSVG(&b, series{name: "heap", unit: "MB", values: pts}, "heap <MB> & more"))
			poly, lines, texts := svgDoc(t, b.String())
			f, q := windows(pts, 0)
			require.Len(t, poly, len(pts))
			for _, p := range poly {
				assert.GreaterOrEqual(t, p[0], float64(padL))
				assert.LessOrEqual(t, p[0], float64(padL+innerW))
				assert.GreaterOrEqual(t, p[1], float64(padT))
				assert.LessOrEqual(t, p[1], float64(padT+innerH))
			}
			assert.InDelta(t, padL, poly[0][0], 0.1, "the first sample at the left edge")
			assert.InDelta(t, padL+innerW, poly[len(poly)-1][0], 0.1, "the last at the right edge")
			want := 0
			for _, part := range [][]point{f, q} {
				if len(part) > 1 {
					want++
				}
			}
			assert.Equal(t, want, lines, "a fit of the fault window and of the quiet tail, where each has points")
			assert.Contains(t, texts, "heap <MB> & more", "the title, escaped and read back")
		})
	}
}

func TestSVGFewPoints(t *testing.T) {
	for _, n := range []int{0, 1, 2} {
		var b strings.Builder
		require.NoError(t, writeSVG(&b, series{name: "files", unit: "files", values: line(n, 1, 5, 0, 0, 1)}, "files"))
		poly, lines, _ := svgDoc(t, b.String())
		assert.Len(t, poly, n)
		assert.Zero(t, lines, "no fit of fewer than two points in the second half (n=%d)", n)
	}
}
