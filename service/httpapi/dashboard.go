package httpapi

import (
	"embed"
	"io/fs"
	"net/http"
)

// ui is the ops dashboard: plain HTML, JS and CSS, no build step. It polls
// /api/overview every 2 s and reads sessions through /api/sessions and
// /api/session.
//
//go:embed ui
var ui embed.FS

// dashboard serves the dashboard's files; "/" is index.html.
func dashboard() http.Handler {
	sub, err := fs.Sub(ui, "ui")
	if err != nil {
		panic(err) // the embedded tree always has ui/
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(w, r)
	})
}
