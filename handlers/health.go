package handlers

import (
	"context"
	"io"
	"net/http"
	"time"
)

// healthz says the process is up. It touches nothing else, so a slow
// database never gets a healthy process restarted.
func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.WriteString(w, "ok")
	return nil
}

// readyz says whether the server can serve requests: the database answers
// and its schema is migrated. A load balancer sends no traffic until it can.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := h.ready(ctx); err != nil {
		// The reason is for operators probing the server; it names no
		// user data.
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready: "+err.Error())
		return nil
	}
	_, _ = io.WriteString(w, "ok")
	return nil
}
