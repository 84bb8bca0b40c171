// Package cli is the terminal client: the commands of the pizza-bot binary
// that talk to a server through its JSON API (package client), for people
// who live in a shell and for scripts.
//
// Every command takes --json and then prints the API's JSON instead of
// text. Exit status: 0 done, 1 refused or failed (the API's message on
// stderr), 2 a usage error, and 3 for `new --wait` when the run waits for
// a decision. Colour only on a terminal, never with NO_COLOR set.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"golang.org/x/term"

	"pizzabot/client"
)

// Exit statuses.
const (
	ExitOK      = 0
	ExitFailed  = 1 // refused by the server, or failed
	ExitUsage   = 2
	ExitWaiting = 3 // new --wait: the run waits for a decision
)

// Env is what a command reads and writes: the process's environment and
// streams, passed in so that tests can run commands in-process.
type Env struct {
	Getenv         func(string) string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Command is one client command.
type Command struct {
	Name    string
	Args    string // the usage line after the name
	Summary string
	run     func(ctx context.Context, x *cmdEnv, args []string) error
}

// commands is the table of the client's commands, in the order help shows.
var commands = []Command{
	{"login", "[URL] [--token TOKEN]", "store the server's URL and a personal access token (prompted when needed)", runLogin},
	{"inbox", "[--queue all|unread|action] [--folder NAME] [-q QUERY] [--limit N] [--cursor C]", "list threads: id, status, title, age, with the queue counts", runInbox},
	{"new", "[--skill S] [--folder F] [--attach FILE]... [--wait] PROMPT (or the prompt on stdin)", "start a run; --wait follows it to its end (exit 0) or to a decision (exit 3)", runNew},
	{"show", "ID", "the conversation, tool calls, decisions and what waits for a decision", runShow},
	{"approve", "ID [CALL]", "approve a waiting call (without CALL: the one waiting)", runApprove},
	{"reject", "ID [CALL] [-m MESSAGE]", "reject a waiting call, with a reason for the model", runReject},
	{"edit", "ID [CALL] [--args JSON]", "change a waiting call's arguments in $EDITOR (or --args) and run it", runEdit},
	{"answer", "ID [CALL] TEXT", "answer a question the run asks", runAnswer},
	{"reply", "ID TEXT", "continue a thread whose run has ended (TEXT or stdin)", runReply},
	{"cancel", "ID", "stop a running or waiting run", action(client.ActionCancel, "cancelled")},
	{"retry", "ID", "run a failed or cancelled thread again", action(client.ActionRetry, "retried")},
	{"read", "ID", "mark a thread read", action(client.ActionRead, "marked read")},
	{"unread", "ID", "mark a thread unread", action(client.ActionUnread, "marked unread")},
	{"archive", "ID", "archive a thread", action(client.ActionArchive, "archived")},
	{"watch", "[ID]", "print each change live (started, waiting, done, streamed text), resuming after a dropped connection", runWatch},
	{"usage", "[--group day|user|skill|model] [--from DAY] [--to DAY]", "what the model calls cost, by day, user, skill or model (admins)", runUsage},
}

// Lookup finds a client command by name.
func Lookup(name string) (Command, bool) {
	for _, c := range commands {
		if c.Name == name {
			return c, true
		}
	}
	return Command{}, false
}

// Usage lists the client's commands, for the binary's help.
func Usage(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.Name, c.Summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
The client commands talk to the server at PIZZA_URL with the token PIZZA_TOKEN,
or those stored by login (default http://127.0.0.1:8080, no token). --json prints
the API's JSON. Exit status: 0 done, 1 refused or failed, 2 usage, 3 waiting
(new --wait).
`)
}

// Run runs the command with its arguments and returns the exit status.
func (c Command) Run(ctx context.Context, args []string, env Env) int {
	x := &cmdEnv{Env: env, name: c.Name}
	err := c.run(ctx, x, args)
	var ue usageError
	var ee exitError
	var ae *client.Error
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		x.usage(env.Stdout, c)
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(env.Stderr, "pizza-bot %s: %s\n", c.Name, ue.msg)
		x.usage(env.Stderr, c)
		return ExitUsage
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ae):
		fmt.Fprintf(env.Stderr, "pizza-bot %s: %s\n", c.Name, ae.Message)
		return ExitFailed
	case errors.Is(err, context.Canceled):
		return ExitFailed
	default:
		fmt.Fprintf(env.Stderr, "pizza-bot %s: %v\n", c.Name, err)
		return ExitFailed
	}
}

// usageError is a command used wrongly: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitError ends a command with a status, its output already written.
type exitError struct{ code int }

func (e exitError) Error() string { return "exit " + strconv.Itoa(e.code) }

// cmdEnv is a running command: its streams, flags and server.
type cmdEnv struct {
	Env
	name   string
	json   bool
	colour bool
	fs     *flag.FlagSet
}

func (x *cmdEnv) usage(w io.Writer, c Command) {
	fmt.Fprintf(w, "Usage: pizza-bot %s %s [--json]\n\n%s.\n", c.Name, c.Args, c.Summary)
	if x.fs != nil {
		fmt.Fprintln(w)
		x.fs.SetOutput(w)
		x.fs.PrintDefaults()
	}
}

// flags starts the command's flag set, with --json.
func (x *cmdEnv) flags() *flag.FlagSet {
	fs := flag.NewFlagSet(x.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // Run prints usage once, its own way
	fs.Usage = func() {}
	fs.BoolVar(&x.json, "json", false, "print the API's JSON instead of text")
	x.fs = fs
	return fs
}

// parse reads flags anywhere among the arguments (`reject 42 -m no` as well
// as `reject -m no 42`); everything after "--" is an argument.
func (x *cmdEnv) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := x.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		rest := x.fs.Args()
		consumed := args[:len(args)-len(rest)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			pos = append(pos, rest...)
			rest = nil
		}
		if len(rest) == 0 {
			x.colour = x.useColour()
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// useColour: only on a terminal, never with NO_COLOR (no-color.org) or a
// dumb terminal, never for JSON.
func (x *cmdEnv) useColour() bool {
	if x.json || x.Getenv("NO_COLOR") != "" || x.Getenv("TERM") == "dumb" {
		return false
	}
	f, ok := x.Stdout.(*os.File)
	return ok && isTerminal(f)
}

// client connects to the server: PIZZA_URL and PIZZA_TOKEN, else the
// config file written by login. A stored token is only sent to the server
// it was stored for.
func (x *cmdEnv) client() (*client.Client, error) {
	cfg, _, err := loadConfig(x.Getenv)
	if err != nil {
		return nil, err
	}
	url, token := cfg.URL, cfg.Token
	if u := strings.TrimSpace(x.Getenv("PIZZA_URL")); u != "" {
		if strings.TrimRight(u, "/") != strings.TrimRight(url, "/") {
			token = ""
		}
		url = u
	}
	if t := strings.TrimSpace(x.Getenv("PIZZA_TOKEN")); t != "" {
		token = t
	}
	if url == "" {
		url = defaultURL
	}
	return client.New(client.Config{URL: url, Token: token})
}

// defaultURL is a laptop server's address.
const defaultURL = "http://127.0.0.1:8080"

// printJSON writes an answer's JSON as the API sent it, one value a line.
func (x *cmdEnv) printJSON(raw []byte) {
	out := strings.TrimRight(string(raw), "\n")
	fmt.Fprintln(x.Stdout, out)
}

// threadID parses a thread id argument.
func threadID(s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "#"), 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("%q is not a thread id (a number, as inbox lists them)", s)
	}
	return id, nil
}

// oneID reads the single ID argument of a command.
func (x *cmdEnv) oneID(args []string) (int64, error) {
	pos, err := x.parse(args)
	if err != nil {
		return 0, err
	}
	if len(pos) != 1 {
		return 0, usagef("want one thread id, got %d arguments", len(pos))
	}
	return threadID(pos[0])
}

// readStdin reads text from stdin (a prompt, a reply), saying so on a terminal.
func (x *cmdEnv) readStdin(what string) (string, error) {
	if f, ok := x.Stdin.(*os.File); ok && isTerminal(f) {
		fmt.Fprintf(x.Stderr, "Type the %s, then Ctrl-D:\n", what)
	}
	if x.Stdin == nil {
		return "", nil
	}
	b, err := io.ReadAll(io.LimitReader(x.Stdin, 1<<20))
	return strings.TrimSpace(string(b)), err
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
