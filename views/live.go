package views

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"pizzabot/db"
)

// A page's live updates (handlers/events.go) come over one event stream,
// opened by the element Layout renders with liveConnection. Its URL names
// what the page shows, so that the stream sends what that page needs: the
// listing's rows (list), the open thread's parts (thread), and always the
// queue counts. since is the event log's position when the page was loaded:
// the stream resumes there, so nothing that happened in between is lost.

type liveKey struct{}

type liveInfo struct {
	since string
	page  string
}

// WithLive records in a request's context the event log position its page
// is rendered at, and the page's own URL (a boosted request's Nav.Current
// is the page it came from); without it, pages open no event stream.
func WithLive(ctx context.Context, since, page string) context.Context {
	return context.WithValue(ctx, liveKey{}, liveInfo{since: since, page: page})
}

// liveURL is the event stream URL of a page, "" when live updates are off.
func liveURL(ctx context.Context, nav *Nav) string {
	info, ok := ctx.Value(liveKey{}).(liveInfo)
	if !ok || nav == nil {
		return ""
	}
	v := url.Values{}
	if info.since != "" {
		v.Set("since", info.since)
	}
	path, _, _ := strings.Cut(info.page, "?")
	if id, ok := strings.CutPrefix(path, "/threads/"); ok {
		if n, err := strconv.ParseInt(id, 10, 64); err == nil && n > 0 {
			v.Set("thread", id)
		}
	} else if strings.HasPrefix(path, "/inbox/") {
		v.Set("list", info.page)
	}
	return "/events?" + v.Encode()
}

// SortKey orders rows as the listings do, by (updated_at, id) descending:
// the browser compares keys as strings to put a live row in its place.
func SortKey(t db.Thread) string {
	return fmt.Sprintf("%017d.%019d", t.UpdatedAt.UnixMicro(), t.ID)
}

// Notification is what a browser notification about a thread says, sent
// as JSON on the event stream.
type Notification struct {
	Thread int64  `json:"thread"`
	Title  string `json:"title"`
	Body   string `json:"body"`
	URL    string `json:"url"`
	Status string `json:"status"`
}

// NewNotification words the notification of a thread that finished or
// stopped for the user; line is the first line of its answer, question or
// error.
func NewNotification(t db.Thread, line string) Notification {
	head := statusName(t.Status)
	if t.Skill != "" {
		head += " · " + t.Skill
	}
	body := head
	if line != "" {
		body += "\n" + line
	}
	return Notification{Thread: t.ID, Title: t.Title, Body: body, URL: threadURL(t.ID), Status: t.Status}
}
