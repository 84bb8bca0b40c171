package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"pizzabot/apiv1"
	"pizzabot/client"
)

func runWatch(ctx context.Context, x *cmdEnv, args []string) error {
	x.flags()
	pos, err := x.parse(args)
	if err != nil {
		return err
	}
	var only int64
	switch len(pos) {
	case 0:
	case 1:
		if only, err = threadID(pos[0]); err != nil {
			return err
		}
	default:
		return usagef("want at most one thread id")
	}
	c, err := x.client()
	if err != nil {
		return err
	}
	w := &watcher{x: x, c: c, known: map[int64]apiv1.Thread{}}
	err = c.Watch(ctx, client.WatchOptions{
		Thread: only,
		OnDisconnect: func(err error, wait time.Duration) {
			w.endLine()
			fmt.Fprintf(x.Stderr, "Connection lost (%v); reconnecting in %s.\n", err, wait.Round(100*time.Millisecond))
		},
	}, func(ev client.Event) error { return w.event(ctx, ev) })
	w.endLine()
	return err
}

// watcher prints a stream's events: a line per change, streamed text as it
// comes.
type watcher struct {
	x      *cmdEnv
	c      *client.Client
	ready  int
	known  map[int64]apiv1.Thread // as last printed
	open   int64                  // the thread whose streamed text the last line holds
	opened bool
}

func (w *watcher) event(ctx context.Context, ev client.Event) error {
	x := w.x
	if x.json {
		line, _ := json.Marshal(struct {
			Event string          `json:"event"`
			ID    string          `json:"id,omitempty"`
			Data  json.RawMessage `json:"data"`
		}{ev.Type, ev.ID, ev.Data})
		fmt.Fprintln(x.Stdout, string(line))
		return nil
	}
	switch ev.Type {
	case apiv1.EventReady:
		w.ready++
		if w.ready == 1 {
			fmt.Fprintf(x.Stderr, "Watching %s (Ctrl-C to stop).\n", w.c.URL())
		} else {
			fmt.Fprintln(x.Stderr, "Reconnected; caught up.")
		}
	case apiv1.EventResync:
		w.endLine()
		fmt.Fprintln(x.Stderr, "Some changes were missed while disconnected: run pizza-bot inbox for the current state.")
	case apiv1.EventDelta:
		w.delta(ev.Delta)
	case apiv1.EventThread:
		w.thread(ctx, ev.Thread)
	}
	return nil
}

// endLine ends a line of streamed text.
func (w *watcher) endLine() {
	if w.opened {
		fmt.Fprintln(w.x.Stdout)
		w.opened = false
	}
}

func (w *watcher) prefix(id int64) string {
	return w.x.paint(dim, time.Now().Format("15:04:05")) + " " + w.x.paint(bold, fmt.Sprintf("#%d", id))
}

func (w *watcher) delta(d *apiv1.DeltaEvent) {
	if d.Text == "" {
		return
	}
	if !w.opened || w.open != d.Thread || d.Reset {
		w.endLine()
		fmt.Fprintf(w.x.Stdout, "%s ▸ ", w.prefix(d.Thread))
		w.open, w.opened = d.Thread, true
	}
	fmt.Fprint(w.x.Stdout, strings.ReplaceAll(d.Text, "\n", "\n    "))
}

// thread prints what changed about a thread since it was last printed.
func (w *watcher) thread(ctx context.Context, e *apiv1.ThreadEvent) {
	x := w.x
	w.endLine()
	name := w.prefix(e.ID)
	if e.ParentID != nil {
		name += x.paint(dim, fmt.Sprintf(" (sub-agent of #%d)", *e.ParentID))
	}
	if e.Thread == nil || e.Has("deleted") {
		fmt.Fprintf(x.Stdout, "%s deleted\n", name)
		delete(w.known, e.ID)
		return
	}
	t := *e.Thread
	before, seen := w.known[e.ID]
	w.known[e.ID] = t
	var what []string
	switch {
	case e.Has("started"):
		skill := ""
		if t.Skill != nil {
			skill = " (skill " + *t.Skill + ")"
		}
		fmt.Fprintf(x.Stdout, "%s started %q%s\n", name, t.Title, skill)
		if t.Status == client.StatusRunning {
			return
		}
		what = append(what, x.status(t.Status))
	case !seen && e.Has("status"), seen && before.Status != t.Status:
		what = append(what, x.status(t.Status))
	}
	if seen {
		if before.Unread != t.Unread {
			what = append(what, map[bool]string{true: "unread", false: "read"}[t.Unread])
		}
		if before.Archived != t.Archived {
			what = append(what, map[bool]string{true: "archived", false: "unarchived"}[t.Archived])
		}
		if before.Title != t.Title {
			what = append(what, fmt.Sprintf("renamed %q", t.Title))
		}
		if folderName(before.Folder) != folderName(t.Folder) {
			what = append(what, "moved to "+folderName(t.Folder))
		}
	} else if !e.Has("status") && e.Has("thread") {
		what = append(what, "updated")
	}
	if len(what) == 0 {
		return // messages and tool calls: their text streamed, or show has them
	}
	line := fmt.Sprintf("%s %s %q", name, strings.Join(what, ", "), t.Title)
	if what[0] == x.status(client.StatusWaiting) || what[0] == x.status(client.StatusFailed) {
		// Say what it waits for, or why it failed.
		if d, err := w.c.GetThread(ctx, e.ID); err == nil {
			switch {
			case d.Status == client.StatusFailed && d.Error != nil:
				line += ": " + *d.Error
			case d.Status == client.StatusWaiting && len(d.Pending) == 0:
				line += ": " + d.Summary
			case d.Status == client.StatusWaiting:
				var calls []string
				for _, p := range d.Pending {
					calls = append(calls, fmt.Sprintf("%s %s (call %d)", p.Kind, p.Tool, p.ID))
				}
				line += ": " + strings.Join(calls, ", ")
			}
		}
	}
	fmt.Fprintln(x.Stdout, line)
}

func folderName(f *apiv1.Folder) string {
	if f == nil {
		return "no folder"
	}
	return f.Name
}
