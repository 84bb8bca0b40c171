package handlers

import (
	"bytes"
	"mime"
	"net/http"
	"strings"

	"pizzabot/db"
)

// downloadAttachment sends one of the user's attachments as a download.
// Another user's attachment is a 404, like one that does not exist. The
// file is never rendered by the browser: it comes as an attachment, with
// nosniff and a sandboxing content security policy, and types a browser
// would run (HTML, SVG, XML) go as plain bytes.
func (h *Handler) downloadAttachment(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	a, err := db.GetAttachment(ctx, h.pool, userFrom(ctx).ID, id)
	if err != nil {
		return err
	}
	hdr := w.Header()
	hdr.Set("Content-Type", downloadType(a.ContentType))
	disposition := mime.FormatMediaType("attachment", map[string]string{"filename": a.Name})
	if disposition == "" {
		disposition = "attachment"
	}
	hdr.Set("Content-Disposition", disposition)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	hdr.Set("Cache-Control", "private, no-cache")
	hdr.Set("ETag", `"`+a.SHA256+`"`)
	http.ServeContent(w, r, "", a.CreatedAt, bytes.NewReader(a.Content))
	return nil
}

// downloadType is the Content-Type an attachment is sent with.
func downloadType(stored string) string {
	mt, _, err := mime.ParseMediaType(stored)
	if err != nil {
		return "application/octet-stream"
	}
	for _, active := range []string{"html", "xml", "svg", "javascript", "ecmascript"} {
		if strings.Contains(mt, active) {
			return "application/octet-stream"
		}
	}
	return stored
}
