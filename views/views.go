// Package views renders Pizza Bot's HTML with templ. Pages are named XPage
// and wrap Layout; fragments that HTMX swaps into a page are plain nouns
// (ThreadRow, ThreadList, Sidebar). Views do no I/O: handlers load the data
// and pass it in, together with the time to measure "3h ago" against.
package views

import (
	"net/url"
	"strconv"
	"time"

	"pizzabot/db"
	"pizzabot/notify"
	"pizzabot/static"
)

// Asset returns the cache-busting URL of a static file, e.g.
// Asset("app.css") is "/static/3f9a0c21d4e5/app.css".
func Asset(name string) string { return static.URL(name) }

// Field is a form field as it was submitted, with the message to show next
// to it when it was refused.
type Field struct {
	Value string
	Error string
}

// Nav is what the sidebar shows on every page.
type Nav struct {
	User    db.User
	Counts  db.Counts
	Folders []db.Folder
	// Shared are the folders others shared with the user (docs/team.md).
	Shared []db.SharedFolder
	// Queue and FolderID mark the listing being viewed; zero on other pages.
	Queue    db.Queue
	FolderID int64
	// Current is the URL of the page, where the sidebar's forms return to
	// when they are posted without JavaScript.
	Current string
	// NewFolder is the new-folder form as last submitted.
	NewFolder Field
	// NoModel: no default model is configured (PIZZA_MODEL or settings),
	// so a run without a skill that pins one would fail; the inbox and the
	// compose form say so up front.
	NoModel bool
}

// Folder returns the user's folder with the given id, or nil.
func (n Nav) Folder(id int64) *db.Folder {
	for i := range n.Folders {
		if n.Folders[i].ID == id {
			return &n.Folders[i]
		}
	}
	return nil
}

// ListQuery identifies a thread listing: a queue, optional filters and the
// page's position.
type ListQuery struct {
	Queue    db.Queue
	FolderID int64  // 0: any folder
	Trigger  string // "": any trigger kind
	// Search is the search query as typed (the URL's q); "": no search.
	Search string
	After  string // a db.Cursor as written in URLs; "": the first page
}

// URL returns the listing's canonical URL, e.g.
// "/inbox/unread?folder=3&q=renewal&trigger=schedule".
func (q ListQuery) URL() string {
	v := url.Values{}
	if q.FolderID != 0 {
		v.Set("folder", strconv.FormatInt(q.FolderID, 10))
	}
	if q.Trigger != "" {
		v.Set("trigger", q.Trigger)
	}
	if q.Search != "" {
		v.Set("q", q.Search)
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	u := "/inbox/" + string(q.Queue)
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	return u
}

// Filtered reports whether the listing is narrowed by a folder, a trigger
// or a search.
func (q ListQuery) Filtered() bool { return q.FolderID != 0 || q.Trigger != "" || q.Search != "" }

// Filter is the database filter of the listing (its page aside).
func (q ListQuery) Filter() db.ThreadFilter {
	return db.ThreadFilter{Queue: q.Queue, FolderID: q.FolderID, Trigger: q.Trigger, Search: db.ParseSearch(q.Search)}
}

// Clear returns the listing without its search and page: where "Clear the
// search" leads.
func (q ListQuery) Clear() ListQuery {
	q.Search, q.After = "", ""
	return q
}

// Listing is one page of a thread listing.
type Listing struct {
	Query   ListQuery
	Threads []db.Thread
	// Next is where the following page starts; nil on the last page.
	Next *db.Cursor
	Now  time.Time
}

// NextURL returns the URL of the following page, "" on the last page.
func (l Listing) NextURL() string {
	if l.Next == nil {
		return ""
	}
	q := l.Query
	q.After = l.Next.String()
	return q.URL()
}

// Inbox is what InboxPage shows: a queue, possibly narrowed to a folder or
// a trigger kind.
type Inbox struct {
	Nav  Nav
	List Listing
	// Folder is the folder the listing is narrowed to, nil for none.
	Folder *db.Folder
	// Shared is that folder when another user shared it with the reader.
	Shared *db.SharedFolder
}

// ThreadDetail is what ThreadPage shows: the sidebar and the thread (see
// ThreadView in thread.go).
type ThreadDetail struct {
	Nav  Nav
	View ThreadView
}

// Compose is the new-thread form as last submitted.
type Compose struct {
	Nav    Nav
	Prompt Field
	// Folder holds the chosen folder's id, "" for none.
	Folder Field
	// Skill holds the chosen skill's name, "" for none.
	Skill Field
	// Files holds the names of the files sent with a refused form, which
	// the user must choose again (a browser cannot refill a file input).
	Files Field
	// Skills are the skills to choose from, sorted by name, with those
	// that cannot run here.
	Skills []SkillChoice
	// SkillErrors are the skills that failed to load.
	SkillErrors []SkillProblem
}

// SkillChoice is a skill in the compose form's picker.
type SkillChoice struct {
	Name        string
	Description string
	// Missing lists the tools the skill needs that are not connected; the
	// skill cannot be chosen until they are.
	Missing []string
	// Needs says in words what it takes to offer the skill
	// (tools.Toolbox.Needs of Missing).
	Needs []string
}

// SkillProblem is a skill that failed to load, and why.
type SkillProblem struct {
	// Name is the skill's folder name.
	Name  string
	Error string
}

// FolderEdit is one folder on the folders page, with its rename form.
type FolderEdit struct {
	Folder db.Folder
	// Name is the rename field as last submitted; its value is the
	// folder's name when nothing was.
	Name Field
	// Shares are whom the folder is shared with (docs/team.md).
	Shares []db.Share
	// WebhooksOn: the server has chat webhooks; Webhooks are the folder's
	// (docs/notifications.md). WebhookKind, WebhookURL and WebhookLabel
	// are the add form as last submitted; NewSecret a generic webhook's
	// signing secret, shown once.
	WebhooksOn   bool
	Webhooks     []notify.Webhook
	WebhookKind  string
	WebhookURL   Field
	WebhookLabel string
	NewSecret    string
}

// Folders is what FoldersPage shows.
type Folders struct {
	Nav  Nav
	Rows []FolderEdit
}

// Problem is an error shown to the user.
type Problem struct {
	// Nav is nil when the user is unknown or the sidebar could not be
	// loaded; the page then shows without it.
	Nav       *Nav
	Status    int
	Message   string
	RequestID string
}
