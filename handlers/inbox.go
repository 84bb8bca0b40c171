package handlers

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"pizzabot/db"
	"pizzabot/views"
)

// pageSize is the number of threads on one page of a listing.
const pageSize = 50

// listQueue shows a queue: GET /inbox/{queue}?folder=ID&trigger=KIND&q=QUERY&after=CURSOR.
// The "Older threads" link asks for the next page with HX-Target
// "load-more" and gets only its rows, which htmx appends in place.
func (h *Handler) listQueue(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	q, err := parseListQuery(r.PathValue("queue"), r.URL.Query())
	if err != nil {
		return err
	}
	var folder *db.Folder
	var shared *db.SharedFolder
	if q.FolderID != 0 {
		a, err := h.access(ctx)
		if err != nil {
			return err
		}
		if sf, ok := a.Folder(q.FolderID); ok {
			// A folder shared with the user: theirs to read, not to rename.
			shared = &sf
			folder = &db.Folder{ID: sf.ID, UserID: sf.OwnerID, Name: sf.Name}
		} else {
			f, err := db.GetFolder(ctx, h.pool, user.ID, q.FolderID)
			if err != nil {
				return err
			}
			folder = &f
		}
	}
	a, err := h.access(ctx)
	if err != nil {
		return err
	}
	list, err := h.loadListing(ctx, a, q)
	if err != nil {
		return err
	}
	if wantsFragment(r) && r.Header.Get("HX-Target") == "load-more" {
		return h.render(w, r, http.StatusOK, views.ThreadRows(list))
	}
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	if r.Header.Get("HX-Boosted") == "true" {
		// A boosted filter form sends empty fields (?trigger=); keep the
		// address bar on the canonical URL.
		w.Header().Set("HX-Push-Url", q.URL())
	}
	return h.render(w, r, http.StatusOK, views.InboxPage(views.Inbox{Nav: nav, List: list, Folder: folder, Shared: shared}))
}

// parseListQuery reads a listing's position from its URL. Empty parameters
// count as absent, as a GET form sends them.
func parseListQuery(queue string, v url.Values) (views.ListQuery, error) {
	var q views.ListQuery
	var ok bool
	if q.Queue, ok = db.ParseQueue(queue); !ok {
		return q, httpError{http.StatusNotFound, "There is no queue by that name."}
	}
	if s := v.Get("folder"); s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return q, httpError{http.StatusBadRequest, "The folder in the address is not valid."}
		}
		q.FolderID = id
	}
	if s := v.Get("trigger"); s != "" {
		if !slices.Contains(db.TriggerKinds, s) {
			return q, httpError{http.StatusBadRequest, "The trigger in the address is not valid."}
		}
		q.Trigger = s
	}
	if s := strings.Join(strings.Fields(v.Get("q")), " "); s != "" {
		if len(s) > db.MaxSearchQuery {
			return q, httpError{http.StatusBadRequest, fmt.Sprintf("The search is longer than %d characters.", db.MaxSearchQuery)}
		}
		q.Search = s
	}
	if s := v.Get("after"); s != "" {
		if _, err := db.ParseCursor(s); err != nil {
			return q, httpError{http.StatusBadRequest, "The page in the address is not valid."}
		}
		q.After = s
	}
	return q, nil
}

// parseListURL reads a listing from a local URL such as a form's "return"
// field; ok is false when the URL is not a listing.
func parseListURL(raw string) (views.ListQuery, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return views.ListQuery{}, false
	}
	queue, found := strings.CutPrefix(u.Path, "/inbox/")
	if !found {
		return views.ListQuery{}, false
	}
	q, err := parseListQuery(queue, u.Query())
	return q, err == nil
}

// loadListing loads one page of a listing as a person with access a sees
// it.
func (h *Handler) loadListing(ctx context.Context, a db.Access, q views.ListQuery) (views.Listing, error) {
	var after *db.Cursor
	if q.After != "" {
		c, err := db.ParseCursor(q.After)
		if err != nil {
			return views.Listing{}, httpError{http.StatusBadRequest, "The page in the address is not valid."}
		}
		after = &c
	}
	threads, next, err := db.ListThreads(ctx, h.pool, a, q.Filter(), after, pageSize)
	if err != nil {
		return views.Listing{}, err
	}
	return views.Listing{Query: q, Threads: threads, Next: next, Now: h.now()}, nil
}

// loadNav loads what the sidebar shows, marking the place the user is
// looking at (for an htmx request, the page that sent it).
func (h *Handler) loadNav(ctx context.Context, r *http.Request, user db.User) (views.Nav, error) {
	a, err := h.access(ctx)
	if err != nil {
		return views.Nav{}, err
	}
	counts, err := db.CountThreads(ctx, h.pool, a)
	if err != nil {
		return views.Nav{}, err
	}
	folders, err := db.ListFolders(ctx, h.pool, user.ID)
	if err != nil {
		return views.Nav{}, err
	}
	nav := views.Nav{User: user, Counts: counts, Folders: folders, Shared: a.Shared, Current: currentURL(r)}
	if h.runs != nil {
		nav.NoModel = h.runs.ModelSpec(ctx, h.pool) == ""
	}
	if q, ok := parseListURL(nav.Current); ok {
		nav.Queue, nav.FolderID = q.Queue, q.FolderID
	}
	return nav, nil
}
