package handlers

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// isHTMX reports whether htmx sent the request. A history restore is a
// full page load in all but name, so it does not count.
func isHTMX(r *http.Request) bool {
	return r.Header.Get("HX-Request") == "true" && r.Header.Get("HX-History-Restore-Request") != "true"
}

// wantsFragment reports whether the request swaps a part of the page
// (hx-get, hx-post) rather than navigating (a boosted link or form, which
// gets the whole page).
func wantsFragment(r *http.Request) bool {
	return isHTMX(r) && r.Header.Get("HX-Boosted") != "true"
}

// seeOther sends the browser to url after a POST: a 303 for a plain form,
// HX-Location for htmx, which then loads the page without a full reload
// and pushes its URL.
func seeOther(w http.ResponseWriter, r *http.Request, url string) error {
	if isHTMX(r) {
		w.Header().Set("HX-Location", url)
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	http.Redirect(w, r, url, http.StatusSeeOther)
	return nil
}

// maxFormBytes bounds every form body. The longest field, a prompt, is
// refused above 100 KB with a message next to it; this limit only stops a
// client from making us read without end.
const maxFormBytes = 1 << 20

// parseForm reads a POST form, bounded by maxFormBytes.
func parseForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		if _, ok := err.(*http.MaxBytesError); ok {
			return err
		}
		return httpError{http.StatusBadRequest, "The form could not be read."}
	}
	return nil
}

// pathID parses the {id} of the request's path. A malformed id is a 404,
// like an id that names nothing.
func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, notFound
	}
	return id, nil
}

// localURL returns raw as a path (and query) on this site, or fallback when
// raw is empty or points elsewhere: "return" fields and Referer headers come
// from the client and must not make us an open redirect.
func localURL(raw, fallback string) string {
	if raw == "" || !strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, "//") || strings.HasPrefix(raw, `/\`) {
		return fallback
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return fallback
	}
	out := u.EscapedPath()
	if u.RawQuery != "" {
		out += "?" + u.RawQuery
	}
	return out
}

// sameOriginPath returns the path and query of an absolute URL sent by the
// browser (Referer, HX-Current-URL) when it points at this server, or "".
func sameOriginPath(r *http.Request, raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host != r.Host {
		return ""
	}
	u.Scheme, u.Host, u.User, u.Fragment = "", "", nil, ""
	return localURL(u.String(), "")
}

// currentURL is the page the user is looking at: the request's own URL for
// a page load, or for an htmx request the page that sent it.
func currentURL(r *http.Request) string {
	if isHTMX(r) {
		if p := sameOriginPath(r, r.Header.Get("HX-Current-URL")); p != "" {
			return p
		}
	}
	if r.Method == http.MethodGet {
		return localURL(r.URL.RequestURI(), "/inbox/all")
	}
	return "/inbox/all"
}
