package plot

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/fragsim/fragsim/replay"
)

// ForecastLine is one process's silent-OOM forecast to draw.
type ForecastLine struct {
	Name     string
	Forecast *replay.Forecast
}

// ForecastData returns a forecast's headroom and demand as plot points
// (x in seconds from originNS, y in GiB) and the first shortfall's point
// (ok false when there is none).
func ForecastData(f *replay.Forecast, originNS int64) (headroom, demand plotter.XYs, shortfall plotter.XY, ok bool) {
	const gib = 1 << 30
	for _, p := range f.Series {
		x := float64(p.TimeNS-originNS) / 1e9
		headroom = append(headroom, plotter.XY{X: x, Y: float64(p.HeadroomBytes) / gib})
		demand = append(demand, plotter.XY{X: x, Y: float64(p.MaxRequestBytes) / gib})
	}
	if f.FirstShortfallIndex >= 0 {
		shortfall = plotter.XY{X: float64(f.FirstShortfallTimeNS-originNS) / 1e9, Y: float64(f.ShortfallHeadroomBytes) / gib}
		ok = true
	}
	return headroom, demand, shortfall, ok
}

// Forecast draws the silent-OOM forecast: for each process, the largest
// request it could still be served (headroom) over time against the largest
// request it has made (dashed), the first shortfall marked with a cross.
// Times are seconds from the earliest point. The figure is named "forecast".
func Forecast(title string, lines []ForecastLine) (*Figure, error) {
	origin, have := int64(0), false
	for _, l := range lines {
		if l.Forecast != nil && len(l.Forecast.Series) > 0 {
			if t := l.Forecast.Series[0].TimeNS; !have || t < origin {
				origin, have = t, true
			}
		}
	}
	if !have {
		return nil, fmt.Errorf("forecast: no series to draw")
	}
	p := newPlot(title, "time (s)", "GiB")
	p.Legend.Top = true
	p.Legend.Left = false
	p.Y.Min = 0
	for i, l := range lines {
		if l.Forecast == nil || len(l.Forecast.Series) == 0 {
			continue
		}
		head, dem, sf, ok := ForecastData(l.Forecast, origin)
		col := plotutil.Color(i)
		hl, err := plotter.NewLine(head)
		if err != nil {
			return nil, err
		}
		hl.Color, hl.Width = col, vg.Points(1.5)
		dl, err := plotter.NewLine(dem)
		if err != nil {
			return nil, err
		}
		dl.Color, dl.Width = col, vg.Points(1)
		dl.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(hl, dl)
		p.Legend.Add(l.Name+": headroom", hl)
		p.Legend.Add(l.Name+": largest request so far", dl)
		if ok {
			sc, err := plotter.NewScatter(plotter.XYs{sf})
			if err != nil {
				return nil, err
			}
			sc.Shape = draw.CrossGlyph{}
			sc.Radius = vg.Points(6)
			sc.Color = color.RGBA{R: 200, A: 255}
			p.Add(sc)
			p.Legend.Add(fmt.Sprintf("%s: first shortfall (%.3g s)", l.Name, sf.X), sc)
		}
	}
	return &Figure{Name: ForecastName, Plots: [][]*plot.Plot{{p}}, WidthPx: 1200, HeightPx: 500}, nil
}
