package views

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"pizzabot/db"
)

// PageTitle returns the text of a page's <title>: the page's name after the
// number of threads waiting in Action, e.g. "(3) Unread · Pizza Bot", so a
// pinned tab shows when something needs the user.
func PageTitle(action int64, name string) string {
	title := "Pizza Bot"
	if name != "" {
		title = name + " · " + title
	}
	if action > 0 {
		title = "(" + strconv.FormatInt(action, 10) + ") " + title
	}
	return title
}

var queueNames = map[db.Queue]string{
	db.QueueAll:    "All",
	db.QueueUnread: "Unread",
	db.QueueAction: "Action",
}

// QueueName returns a queue's name as the sidebar shows it.
func QueueName(q db.Queue) string { return queueNames[q] }

var statusNames = map[string]string{
	db.StatusRunning:   "Running",
	db.StatusWaiting:   "Needs action",
	db.StatusDone:      "Done",
	db.StatusFailed:    "Failed",
	db.StatusCancelled: "Cancelled",
}

func statusName(s string) string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return s
}

// threadStatusName is a thread's status as its reader sees it: a waiting
// run that is not in their Action queue (its calls are routed to others,
// four eyes keep them out, they only view it) is "Waiting", not "Needs
// action", which would send them looking for a decision that is not theirs.
func threadStatusName(t db.Thread) string {
	if t.Status == db.StatusWaiting && !t.InAction && t.Role != "" {
		return "Waiting"
	}
	return statusName(t.Status)
}

var triggerNames = map[string]string{
	db.TriggerManual:   "Manual",
	db.TriggerSchedule: "Schedule",
	db.TriggerCatchup:  "Catch-up",
	db.TriggerWebhook:  "Webhook",
}

func triggerName(k string) string {
	if n, ok := triggerNames[k]; ok {
		return n
	}
	return k
}

// triggerTimeLabel says what a thread's trigger time means for its kind.
func triggerTimeLabel(k string) string {
	switch k {
	case db.TriggerSchedule, db.TriggerCatchup:
		return "due"
	case db.TriggerWebhook:
		return "received"
	}
	return "started"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func threadURL(id int64) string { return "/threads/" + itoa(id) }

func folderURL(id int64) string { return ListQuery{Queue: db.QueueAll, FolderID: id}.URL() }

// relTime says how long ago t was, briefly: "now", "5m", "3h", "2d", then
// the date. Times are measured against now, which the handler passes in so
// that a page is rendered against one clock.
func relTime(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "now"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 24*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	case d < 7*24*time.Hour:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	case t.Year() == now.Year():
		return t.UTC().Format("Jan 2")
	}
	return t.UTC().Format("Jan 2, 2006")
}

// absTime is the full time, in UTC; the browser's script rewrites it in the
// reader's time zone.
func absTime(t time.Time) string { return t.UTC().Format("Jan 2, 2006 15:04 UTC") }

// isoTime is the machine-readable time of a <time> element.
func isoTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// prettyJSON indents a tool call's arguments when they are valid JSON, and
// returns them as the model wrote them otherwise.
func prettyJSON(raw string) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(raw), "", "  "); err != nil {
		return raw
	}
	return buf.String()
}

// userName is how the sidebar names the signed-in user.
func userName(u db.User) string {
	switch {
	case u.Name != "":
		return u.Name
	case u.Email != "":
		return u.Email
	}
	return "You"
}

// inboxTitle names a listing in the page title: "Unread", "Research · Unread".
func inboxTitle(p Inbox) string {
	name := QueueName(p.List.Query.Queue)
	if p.List.Query.Search != "" {
		name = "“" + p.List.Query.Search + "” · " + name
	}
	if p.Folder != nil {
		if p.List.Query.Queue == db.QueueAll {
			return p.Folder.Name
		}
		return p.Folder.Name + " · " + name
	}
	return name
}

func emptyTitle(q ListQuery) string {
	switch {
	case q.After != "":
		return "No older threads"
	case q.Search != "":
		return "No threads match “" + q.Search + "”"
	case q.Trigger != "":
		return "No threads match this filter"
	case q.Queue == db.QueueAction:
		return "Nothing needs your attention"
	case q.Queue == db.QueueUnread:
		return "You’re all caught up"
	case q.FolderID != 0:
		return "This folder is empty"
	}
	return "No threads yet"
}

func emptyText(q ListQuery) string {
	switch {
	case q.After != "":
		return "You have reached the end of this list."
	case q.Search != "":
		return "Search finds words in titles, prompts, answers, tool results and attachment names. Use \"quotes\" for a phrase and renew* for a prefix."
	case q.Trigger != "":
		return "No " + triggerName(q.Trigger) + " run is in this list."
	case q.Queue == db.QueueAction:
		return "Runs that stop for an approval, an edit or an answer wait here."
	case q.Queue == db.QueueUnread:
		return "Finished runs you have not read yet show up here."
	case q.FolderID != 0:
		return "Move threads here from any list, or start a new thread in this folder."
	}
	return "Hand an agent a task and come back later: its thread waits here."
}

// composeURL is the new-thread form, with the folder chosen when there is one.
func composeURL(folderID int64) string {
	if folderID == 0 {
		return "/threads/new"
	}
	return "/threads/new?folder=" + itoa(folderID)
}

func folderPath(id int64, action string) string { return "/folders/" + itoa(id) + "/" + action }

// plural counts things in English: "1 thread", "3 threads".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return itoa(n) + " " + noun + "s"
}

// folderStats summarizes a folder's threads: "3 threads, 1 unread".
func folderStats(f db.Folder) string {
	s := plural(f.Threads, "thread")
	if f.Unread > 0 {
		s += ", " + itoa(f.Unread) + " unread"
	}
	return s
}

func problemTitle(p Problem) string {
	var action int64
	if p.Nav != nil {
		action = p.Nav.Counts.Action
	}
	return PageTitle(action, http.StatusText(p.Status))
}

// pagesLabel is a PDF's page count: "1 page", "12 pages".
func pagesLabel(n int) string {
	if n == 1 {
		return "1 page"
	}
	return strconv.Itoa(n) + " pages"
}
