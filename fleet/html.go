package fleet

import (
	"fmt"
	"html/template"
	"io"
)

// WriteHTML writes fleet.html (placeholder until the page lands).
func WriteHTML(w io.Writer, f *Fleet, rows []Row) error {
	_, err := fmt.Fprintf(w, "<!doctype html><title>fleet</title><p>%s</p>", template.HTMLEscapeString(f.Goal))
	return err
}
