package report

import (
	_ "embed"
	"encoding/json"
	"html"
	"io"
	"strings"
)

// The page and its chart library (uPlot, MIT licence: assets/uPlot.LICENSE),
// embedded so that a report opens offline.
var (
	//go:embed assets/report.html
	pageHTML string
	//go:embed assets/report.css
	pageCSS string
	//go:embed assets/report.js
	pageJS string
	//go:embed assets/uPlot.iife.min.js
	uplotJS string
	//go:embed assets/uPlot.min.css
	uplotCSS string
)

// Stylesheet is the report page's CSS, for other pages in the report's
// style (the fleet's page).
func Stylesheet() string { return pageCSS }

// WriteHTML writes the report as one self-contained HTML page: no file,
// network or server is needed to open it.
func (rep *Report) WriteHTML(w io.Writer) error {
	// encoding/json escapes <, > and & in strings, so the data cannot
	// close its script element.
	data, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	title := "fragsim report"
	if rep.Trace.Name != "" {
		title += ": " + rep.Trace.Name
	}
	r := strings.NewReplacer(
		"{{TITLE}}", html.EscapeString(title),
		"{{UPLOT_CSS}}", uplotCSS,
		"{{CSS}}", pageCSS,
		"{{UPLOT_JS}}", uplotJS,
		"{{DATA}}", string(data),
		"{{JS}}", pageJS,
	)
	_, err = r.WriteString(w, pageHTML)
	return err
}
