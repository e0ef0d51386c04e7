package plot

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/fragsim/fragsim/replay"
)

func forecastOf() *replay.Forecast {
	f := &replay.Forecast{FirstShortfallIndex: 2, FirstShortfallTimeNS: 3e9, ShortfallHeadroomBytes: 1 << 30}
	for i, h := range []uint64{4 << 30, 3 << 30, 1 << 30, 2 << 30} {
		f.Series = append(f.Series, replay.ForecastPoint{Index: int64(i), TimeNS: 1e9 + int64(i)*1e9, HeadroomBytes: h, MaxRequestBytes: 2 << 30})
	}
	return f
}

func TestForecastData(t *testing.T) {
	head, dem, sf, ok := ForecastData(forecastOf(), 1e9)
	if len(head) != 4 || head[2].X != 2 || head[2].Y != 1 || dem[0].Y != 2 || head[0].Y != 4 {
		t.Errorf("headroom %v demand %v", head, dem)
	}
	if !ok || sf.X != 2 || sf.Y != 1 {
		t.Errorf("shortfall %v %v, want (2 s, 1 GiB)", sf, ok)
	}
	none := forecastOf()
	none.FirstShortfallIndex = -1
	if _, _, _, ok := ForecastData(none, 0); ok {
		t.Error("a forecast without shortfall has a shortfall point")
	}
}

func TestForecastFigure(t *testing.T) {
	if _, err := Forecast("x", nil); err == nil {
		t.Error("no series: no error")
	}
	fig, err := Forecast("two processes", []ForecastLine{{"a", forecastOf()}, {"b", forecastOf()}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths, err := fig.Save(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 || filepath.Base(paths[0]) != "forecast.png" || filepath.Base(paths[1]) != "forecast.svg" {
		t.Fatalf("paths %v", paths)
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != 1200 || img.Bounds().Dy() != 500 {
		t.Errorf("png %v", img.Bounds())
	}
}
