package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"pizzabot/apiv1"
	"pizzabot/client"
)

// paint wraps s in an ANSI style when colour is on.
func (x *cmdEnv) paint(style, s string) string {
	if !x.colour || s == "" {
		return s
	}
	return "\x1b[" + style + "m" + s + "\x1b[0m"
}

const (
	bold   = "1"
	dim    = "2"
	red    = "31"
	green  = "32"
	yellow = "33"
	cyan   = "36"
)

// status shows a run's status in its colour.
func (x *cmdEnv) status(s string) string {
	switch s {
	case client.StatusRunning:
		return x.paint(cyan, s)
	case client.StatusWaiting:
		return x.paint(yellow, s)
	case client.StatusDone:
		return x.paint(green, s)
	case client.StatusFailed:
		return x.paint(red, s)
	}
	return x.paint(dim, s)
}

// age is how long ago t was, in the inbox's short form.
func age(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "now"
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	case d < 30*24*time.Hour:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	return t.Local().Format("2006-01-02")
}

func runInbox(ctx context.Context, x *cmdEnv, args []string) error {
	fs := x.flags()
	var o client.ListOptions
	fs.StringVar(&o.Queue, "queue", "all", "all, unread (finished, not read) or action (waiting for a decision)")
	fs.StringVar(&o.Folder, "folder", "", "only this folder (a name or an id)")
	fs.StringVar(&o.Query, "q", "", "only threads matching this search")
	fs.IntVar(&o.Limit, "limit", 0, "threads to list (1 to 200; default the server's 50)")
	fs.StringVar(&o.Cursor, "cursor", "", "the next page, as the previous one said")
	pos, err := x.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	switch o.Queue {
	case "all", "unread", "action":
	default:
		return usagef("--queue %q: want all, unread or action", o.Queue)
	}
	c, err := x.client()
	if err != nil {
		return err
	}
	l, err := c.ListThreads(ctx, o)
	if err != nil {
		return err
	}
	if x.json {
		x.printJSON(l.Raw)
		return nil
	}
	head := func(name, queue string, n int64) string {
		s := fmt.Sprintf("%s %d", name, n)
		if queue == o.Queue {
			return x.paint(bold, s)
		}
		return s
	}
	fmt.Fprintf(x.Stdout, "%s · %s · %s\n", head("All", "all", l.Counts.All),
		head("Unread", "unread", l.Counts.Unread), head("Action", "action", l.Counts.Action))
	if len(l.Threads) == 0 {
		fmt.Fprintln(x.Stdout, x.paint(dim, "No threads here."))
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(x.Stdout, 0, 0, 2, ' ', 0)
	for _, t := range l.Threads {
		mark := " "
		if t.Unread {
			mark = x.paint(bold, "●")
		}
		title := t.Title
		if t.Unread {
			title = x.paint(bold, title)
		}
		extra := ""
		if t.Folder != nil {
			extra = x.paint(dim, "["+t.Folder.Name+"]")
		}
		fmt.Fprintf(tw, "%s #%d\t%s\t%s\t%s\t%s\n", mark, t.ID, x.status(t.Status), title, age(t.UpdatedAt, now), extra)
	}
	tw.Flush()
	if l.NextCursor != nil {
		fmt.Fprintf(x.Stderr, "More: pizza-bot inbox --queue %s --cursor %s\n", o.Queue, *l.NextCursor)
	}
	return nil
}

// attachFlag collects --attach FILE, repeatable.
type attachFlag []string

func (a *attachFlag) String() string     { return strings.Join(*a, ",") }
func (a *attachFlag) Set(s string) error { *a = append(*a, s); return nil }

func runNew(ctx context.Context, x *cmdEnv, args []string) error {
	fs := x.flags()
	var r client.StartRequest
	var files attachFlag
	var wait bool
	fs.StringVar(&r.Skill, "skill", "", "the skill to run")
	fs.StringVar(&r.Folder, "folder", "", "the folder to put the thread in, by name")
	fs.Var(&files, "attach", "a file to attach (repeat for more)")
	fs.BoolVar(&wait, "wait", false, "follow the run: exit 0 when done, 3 when it waits for a decision, 1 when it fails")
	pos, err := x.parse(args)
	if err != nil {
		return err
	}
	r.Files = files
	r.Prompt = strings.TrimSpace(strings.Join(pos, " "))
	if r.Prompt == "" || r.Prompt == "-" {
		if r.Prompt, err = x.readStdin("prompt"); err != nil {
			return err
		}
	}
	if r.Prompt == "" {
		return usagef("the prompt is empty: give it as arguments or on stdin")
	}
	c, err := x.client()
	if err != nil {
		return err
	}
	t, err := c.StartThread(ctx, r)
	if err != nil {
		return err
	}
	if !wait {
		if x.json {
			x.printJSON(t.Raw)
		} else {
			fmt.Fprintf(x.Stdout, "Started #%d: %s\n", t.ID, c.PageURL(t.URL))
		}
		return nil
	}
	if !x.json {
		fmt.Fprintf(x.Stderr, "Started #%d: %s\n", t.ID, c.PageURL(t.URL))
	}
	d, err := waitSettled(ctx, c, t.ID)
	if err != nil {
		return err
	}
	if x.json {
		x.printJSON(d.Raw)
	}
	switch d.Status {
	case client.StatusWaiting:
		if !x.json {
			x.showPending(x.Stdout, d)
		}
		return exitError{ExitWaiting}
	case client.StatusDone:
		if !x.json {
			fmt.Fprintln(x.Stdout, lastAnswer(d))
		}
		return nil
	default:
		msg := d.Status
		if d.Error != nil {
			msg += ": " + *d.Error
		}
		fmt.Fprintf(x.Stderr, "pizza-bot new: #%d %s\n", d.ID, msg)
		return exitError{ExitFailed}
	}
}

// errSettled stops a watch once the run has settled.
var errSettled = fmt.Errorf("settled")

// waitSettled follows a thread until its run ends or waits for a decision,
// and returns it then. It subscribes before it looks, so a run that settles
// in between is not missed.
func waitSettled(ctx context.Context, c *client.Client, id int64) (client.ThreadDetail, error) {
	var d client.ThreadDetail
	check := func() error {
		var err error
		if d, err = c.GetThread(ctx, id); err != nil {
			return err
		}
		if d.Status != client.StatusRunning {
			return errSettled
		}
		return nil
	}
	err := c.Watch(ctx, client.WatchOptions{Thread: id}, func(ev client.Event) error {
		switch ev.Type {
		case apiv1.EventReady, apiv1.EventResync:
			return check()
		case apiv1.EventThread:
			if ev.Thread.ID == id && (ev.Thread.Thread == nil || ev.Thread.Thread.Status != client.StatusRunning) {
				return check()
			}
		}
		return nil
	})
	if err == errSettled {
		return d, nil
	}
	if err == nil {
		err = ctx.Err()
	}
	return d, err
}

// lastAnswer is the run's final text: its last assistant message.
func lastAnswer(d client.ThreadDetail) string {
	for i := len(d.Messages) - 1; i >= 0; i-- {
		if m := d.Messages[i]; m.Role == "assistant" && strings.TrimSpace(m.Content) != "" {
			return strings.TrimSpace(m.Content)
		}
	}
	return ""
}

func runShow(ctx context.Context, x *cmdEnv, args []string) error {
	x.flags()
	id, err := x.oneID(args)
	if err != nil {
		return err
	}
	c, err := x.client()
	if err != nil {
		return err
	}
	d, err := c.GetThread(ctx, id)
	if err != nil {
		return err
	}
	if x.json {
		x.printJSON(d.Raw)
		return nil
	}
	w := x.Stdout
	fmt.Fprintf(w, "%s\n", x.paint(bold, fmt.Sprintf("#%d %s", d.ID, d.Title)))
	meta := []string{x.status(d.Status)}
	if d.Skill != nil {
		meta = append(meta, "skill "+*d.Skill)
	}
	if d.Folder != nil {
		meta = append(meta, "folder "+d.Folder.Name)
	}
	meta = append(meta, d.Trigger.Kind+" "+d.Trigger.At.Local().Format("2006-01-02 15:04"))
	if d.Unread {
		meta = append(meta, "unread")
	}
	if d.Archived {
		meta = append(meta, "archived")
	}
	fmt.Fprintf(w, "%s\n%s\n", strings.Join(meta, " · "), x.paint(dim, c.PageURL(d.URL)))
	if d.Error != nil {
		fmt.Fprintf(w, "%s %s\n", x.paint(red, "error:"), *d.Error)
	}
	for _, m := range d.Messages {
		fmt.Fprintln(w)
		at := x.paint(dim, m.CreatedAt.Local().Format("15:04:05"))
		switch m.Role {
		case "user":
			fmt.Fprintf(w, "%s  %s\n", x.paint(bold, "you"), at)
		case "tool":
			label := "result of " + m.Name
			if m.IsError != nil && *m.IsError {
				label = x.paint(red, "error from "+m.Name)
			}
			fmt.Fprintf(w, "%s  %s\n", x.paint(bold, label), at)
		default:
			fmt.Fprintf(w, "%s  %s\n", x.paint(bold, m.Role), at)
		}
		if text := strings.TrimSpace(m.Content); text != "" {
			if m.Role == "tool" {
				text = clip(text, 20)
			}
			fmt.Fprintln(w, indent(text, "  "))
		}
		for _, tc := range m.ToolCalls {
			fmt.Fprintf(w, "  → %s %s\n", x.paint(cyan, tc.Name), x.paint(dim, tc.ID))
			fmt.Fprintln(w, indent(prettyJSON(tc.Arguments), "      "))
		}
	}
	if len(d.Decisions) > 0 {
		fmt.Fprintf(w, "\n%s\n", x.paint(bold, "Decisions"))
		for _, dc := range d.Decisions {
			who := "someone"
			if dc.DecidedBy != nil {
				who = dc.DecidedBy.Name
			}
			fmt.Fprintf(w, "  %s %s by %s at %s", dc.Type, dc.Tool, who, dc.DecidedAt.Local().Format("2006-01-02 15:04"))
			if dc.Message != "" {
				fmt.Fprintf(w, ": %q", dc.Message)
			}
			fmt.Fprintln(w)
			if len(dc.EditedArguments) > 0 && string(dc.EditedArguments) != "null" {
				fmt.Fprintf(w, "    edited to %s\n", compactJSON(dc.EditedArguments))
			}
		}
	}
	if d.Status == client.StatusWaiting {
		fmt.Fprintln(w)
		x.showPending(w, d)
	}
	return nil
}

// showPending lists what a waiting thread waits for, with every argument
// and the commands that decide it.
func (x *cmdEnv) showPending(w io.Writer, d client.ThreadDetail) {
	if len(d.Pending) == 0 {
		// Waiting on no call listed here (its own or its sub-agents'):
		// the summary says on what, e.g. a budget that stopped the run.
		fmt.Fprintf(w, "%s %s (see the thread's page)\n", x.paint(yellow, "Waiting:"), d.Summary)
		return
	}
	fmt.Fprintf(w, "%s\n", x.paint(yellow+";"+bold, "Waiting for you"))
	for _, p := range d.Pending {
		if p.Kind == "connection" {
			// The run waits for its user's sign-in, or their own value of
			// a ${user:NAME} the server takes (Secret, the NAME: never a
			// value), not for a decision.
			switch {
			case p.Secret != "" && p.ConnectURL != "":
				fmt.Fprintf(w, "  enter your %s for %s  (%s)\n", x.paint(cyan, p.Secret), x.paint(cyan, p.Server), p.Reason)
			case p.Secret != "":
				fmt.Fprintf(w, "  the run's owner's %s for %s  (%s)\n", x.paint(cyan, p.Secret), x.paint(cyan, p.Server), p.Reason)
			default:
				fmt.Fprintf(w, "  connect %s  (%s)\n", x.paint(cyan, p.Server), p.Reason)
			}
			switch {
			case p.ConnectURL != "":
				fmt.Fprintf(w, "    open %s on the server in a browser where you are signed in: the run goes on by itself\n", p.ConnectURL)
			case p.Secret != "":
				fmt.Fprintf(w, "    the run's owner must enter their %s\n", p.Secret)
			default:
				fmt.Fprintln(w, "    the run's owner must connect it")
			}
			continue
		}
		fmt.Fprintf(w, "  call %d  %s  %s  (%s)\n", p.ID, x.paint(cyan, p.Tool), p.Kind, strings.Join(p.AllowedDecisions, ", "))
		if p.Description != "" {
			fmt.Fprintln(w, indent(p.Description, "    "))
		}
		if p.Kind != "question" {
			fmt.Fprintln(w, indent(prettyJSON(p.Arguments), "    "))
		}
		if in := p.InnerCall; in != nil {
			fmt.Fprintf(w, "    an approval lets the script's call %d run: %s\n", in.Seq+1, x.paint(cyan, in.Tool))
			fmt.Fprintln(w, indent(prettyJSON(in.Arguments), "      "))
		}
		if p.Undecidable != "" {
			fmt.Fprintf(w, "    %s %s. It keeps waiting: see the thread's page for the way out, or pizza-bot cancel %d.\n",
				x.paint(yellow+";"+bold, "Nobody can decide it:"), p.Undecidable, d.ID)
		}
	}
	call := ""
	if len(d.Pending) > 1 {
		call = " CALL"
	}
	var hints []string
	for _, h := range []struct{ decision, cmd string }{
		{"approve", "approve %d%s"}, {"reject", "reject %d%s -m WHY"}, {"edit", "edit %d%s"}, {"respond", "answer %d%s TEXT"},
	} {
		for _, p := range d.Pending {
			if p.Allows(h.decision) {
				hints = append(hints, "pizza-bot "+fmt.Sprintf(h.cmd, d.ID, call))
				break
			}
		}
	}
	if len(hints) > 0 {
		fmt.Fprintf(w, "%s\n", x.paint(dim, strings.Join(hints, " · ")))
	}
}

// prettyJSON indents JSON arguments; text that is not JSON shows as is.
func prettyJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	// A model's raw, non-JSON arguments arrive as a JSON string.
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return buf.String()
}

func compactJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return string(raw)
	}
	return buf.String()
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// clip keeps the first n lines of a long tool result.
func clip(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n… %d more lines (--json shows all)", len(lines)-n)
}

func runReply(ctx context.Context, x *cmdEnv, args []string) error {
	x.flags()
	pos, err := x.parse(args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("want a thread id and the text")
	}
	id, err := threadID(pos[0])
	if err != nil {
		return err
	}
	text := strings.TrimSpace(strings.Join(pos[1:], " "))
	if text == "" || text == "-" {
		if text, err = x.readStdin("reply"); err != nil {
			return err
		}
	}
	if text == "" {
		return usagef("the reply is empty")
	}
	c, err := x.client()
	if err != nil {
		return err
	}
	t, err := c.Reply(ctx, id, text)
	if err != nil {
		return err
	}
	return x.printThread(t, "replied")
}

// action is a command that applies a change without parameters.
func action(name, done string) func(ctx context.Context, x *cmdEnv, args []string) error {
	return func(ctx context.Context, x *cmdEnv, args []string) error {
		x.flags()
		id, err := x.oneID(args)
		if err != nil {
			return err
		}
		c, err := x.client()
		if err != nil {
			return err
		}
		t, err := c.Act(ctx, id, name)
		if err != nil {
			return err
		}
		return x.printThread(t, done)
	}
}

// printThread reports a change: the thread's JSON, or a line.
func (x *cmdEnv) printThread(t client.Thread, done string) error {
	if x.json {
		x.printJSON(t.Raw)
		return nil
	}
	fmt.Fprintf(x.Stdout, "#%d %s: %s · %s\n", t.ID, done, x.status(t.Status), t.Title)
	return nil
}
