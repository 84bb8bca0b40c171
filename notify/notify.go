// Package notify tells people what waits for them when no Pizza Bot tab is
// open: Web Push, e-mail and chat webhooks (docs/notifications.md). An event
// is recorded and delivered by one River job per channel target, unique by
// event and target, so replicas never send it twice and a crash never loses
// it.
package notify

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
)

// Kind is what an event tells.
type Kind string

// The kinds of event a person can choose to hear about.
const (
	Decision Kind = "decision" // a call waits for the person's decision
	Reminder Kind = "reminder" // a call still waits (docs/skills.md remindAfter)
	Finished Kind = "finished" // a run finished
	Failed   Kind = "failed"   // a run failed
	Digest   Kind = "digest"   // the daily digest of what waits
	// Attention: a run stopped for its owner with no call to decide (a
	// budget hold: docs/team.md#usage-and-budgets).
	Attention Kind = "attention"
)

// Event is one thing to tell one person. It carries no secret: channels
// may send any of it.
type Event struct {
	// Key is unique per event ("decision:call:42", "reminder:call:42:3"):
	// one delivery per key and target.
	Key      string
	Kind     Kind
	UserID   int64
	ThreadID int64 // 0 for a digest
	CallID   int64 // the waiting call, for Decision and Reminder
	Title    string
	// Summary is one line of what waits or what happened.
	Summary string
	// Path is where to open it in the app ("/threads/12#decide"); a
	// channel joins it to the public URL.
	Path string
	// Calls are the waiting calls with every argument as the page shows
	// them (Decision, Reminder, Digest).
	Calls []Call
}

// Call is a waiting call as a notification shows it.
type Call struct {
	Tool string
	Why  string
	Args []Arg
	// Thread and Path name the thread the call waits in and its decision,
	// in a digest (which lists calls of many threads); empty otherwise.
	Thread string
	Path   string
}

// Arg is one argument of a call, its value as the page shows it.
type Arg struct {
	Name  string
	Value string
}

// Target is one place a channel delivers to for a person: a push
// subscription, an e-mail address, a webhook; ID is its row in the
// channel's table.
type Target struct {
	Channel string
	ID      int64
	Label   string
	// FolderID is the folder whose webhook this is; 0: the person's own.
	FolderID int64
}

// Channel delivers events to the targets a person set up.
type Channel interface {
	// Name is the channel's name in preferences and records ("push",
	// "email", "slack", "teams", "discord", "gchat", "webhook").
	Name() string
	// Targets lists userID's targets of this channel.
	Targets(ctx context.Context, q db.Querier, userID int64) ([]Target, error)
	// Send delivers ev to target. An error wrapping ErrGone removes the
	// target (a push subscription the service answered 404 or 410); one
	// wrapping ErrNotDue records the delivery as not sent (skipped);
	// other errors are retried with backoff.
	Send(ctx context.Context, target Target, ev Event) error
}

// ErrGone is wrapped by Send's error when the target no longer exists.
var ErrGone = errors.New("the target is gone")

// ErrNotDue is wrapped by Send's error when the target is no longer to be
// told of the event (a folder's webhook, of a thread moved out of it).
var ErrNotDue = errors.New("no longer to be told")

// Publisher records events and queues their deliveries (one River job per
// channel target) in the caller's transaction: rolled back, nothing is
// sent. The run service holds one (jobs.Config.Notify); nil sends nothing.
type Publisher interface {
	// Publish tells ev to its person, on every channel they want it on.
	Publish(ctx context.Context, tx pgx.Tx, ev Event) error
	// PublishAll is Publish of each of evs, each person's preferences and
	// targets read once.
	PublishAll(ctx context.Context, tx pgx.Tx, evs []Event) error
	// PublishFolder posts each of evs about a thread in a folder to the
	// folder's webhooks, once per (event, webhook), whoever is told.
	PublishFolder(ctx context.Context, tx pgx.Tx, evs []Event) error
}
