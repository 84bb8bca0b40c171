package handlers

import (
	"bytes"
	"io/fs"
	"net/http"
	"time"

	"pizzabot/static"
)

// serveStatic serves an embedded asset at /static/{hash}/{path}. Asset URLs
// carry the hash of their content (views.Asset), so a matching hash is
// cached for a year. A stale hash, asked for by a page rendered before a
// deploy, still gets the current file, revalidated on every use.
func (h *Handler) serveStatic(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("path")
	current, ok := static.Hash(name)
	if !ok {
		return httpError{http.StatusNotFound, "No such file."}
	}
	b, err := fs.ReadFile(static.FS(), name)
	if err != nil {
		return err
	}
	if r.PathValue("hash") == current {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	w.Header().Set("ETag", `"`+current+`"`)
	// ServeContent sets the type from the extension and answers
	// If-None-Match and Range.
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
	return nil
}
