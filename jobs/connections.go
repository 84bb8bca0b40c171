package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/db"
	"pizzabot/tools"
)

// Each person's own accounts (docs/mcp.md, issue 30). Some MCP servers are
// used with each user's own sign-in (SignIns): a run's calls of their tools
// carry its user's token (Credentials), never a shared one; a sub-agent's
// and a schedule's or webhook's run are their owner's, so they use the
// owner's connections.
//
// A run needs a connection its user has not made (or the server revoked,
// or whose refresh failed) in three places, and waits for it in Action
// ("Connect <server> to continue", db/connectionwaits.go) in each:
//
//  1. Before a model call, when its skill's allowed-tools name tools of
//     the server: the run waits before calling the model.
//  2. A run without a skill (or whose skill lists no tools) is instead not
//     offered the tools of the servers its user has not connected, and the
//     thread says which (db.Thread.LeftOut).
//  3. During a call, when the server answers 401 (or no token can be had):
//     the server refused the call, which did not run, so it goes back to
//     ready and runs again once the run resumes.
//
// Connecting the server (the callback of connections.Service.Finish)
// calls ConnectionReady, which ends the user's waits for it and resumes in
// the same transaction every run that waits for nothing else, as Decide
// does after a decision: each run once, whichever replica calls it and
// however many do. The wait is recorded before the user can see it; a
// connection made between a step's look and its commit is caught by the
// step looking again after the commit (recheck).

// SignIns are the MCP servers each user signs in to themselves
// (mcpclient.Manager).
type SignIns interface {
	// SignInServers lists them.
	SignInServers() []string
	// OpenAs opens userID's session to server with their token from
	// signer, which lists the server's tools for the toolbox; a
	// *agent.NeedsConnection when they have no live connection to it.
	OpenAs(ctx context.Context, signer mcpclient.Signer, userID int64, server string) error
	// Credentialed reports whether userID has what server needs (a
	// token, their ${user:NAME} values), without reaching it.
	Credentialed(ctx context.Context, signer mcpclient.Signer, userID int64, server string) error
	// ServerNames lists every MCP server in use, each user's or shared:
	// those configured, turned on and loaded without error (Missing tells
	// a skill's connections naming any other).
	ServerNames() []string
}

// signIns opens the sessions of userID to the servers each user signs in
// to that a run of skill may use. A skill that lists tools of such servers,
// or names them in its connections, waits for those its user has not
// connected (waits); a run without a skill, or whose skill lists no tools,
// is offered every tool, and goes without the other servers its user has
// not connected (leftOut).
func (rt *Runtime) signIns(ctx context.Context, userID int64, skill *agent.Skill) (waits []db.ConnectionWait, leftOut []string, err error) {
	if rt.cfg.SignIns == nil || rt.cfg.Credentials == nil {
		return nil, nil, nil
	}
	servers := rt.cfg.SignIns.SignInServers()
	declared := skill != nil && len(skill.AllowedTools) > 0
	// required: the skill waits for it (its tools, or its connections).
	required := func(s string) bool { return skill != nil && slices.Contains(skill.Connections, s) }
	if declared {
		serverOf := rt.cfg.Tools.ServerOf()
		required = func(s string) bool { return slices.Contains(skill.Connections, s) || declares(skill, s, serverOf) }
		servers = slices.DeleteFunc(slices.Clone(servers), func(s string) bool { return !required(s) })
	}
	for _, s := range servers {
		err := rt.cfg.SignIns.OpenAs(ctx, rt.cfg.Credentials, userID, s)
		var nc *agent.NeedsConnection
		var ce *mcpclient.CallError
		switch {
		case err == nil:
		case errors.As(err, &nc):
			if required(s) {
				waits = append(waits, db.ConnectionWait{Server: s, Secret: nc.Secret, Reason: nc.Reason})
			} else {
				leftOut = append(leftOut, s)
			}
		case errors.As(err, &ce):
			// The server is unreachable: its tools are those last listed,
			// and a call of one says so to the model.
			rt.cfg.Logger.WarnContext(ctx, "open a user's MCP session", "server", s, "user_id", userID, "err", err)
		default:
			return nil, nil, err
		}
	}
	return waits, leftOut, nil
}

// declares reports whether skill's allowed-tools name a tool of server
// (its wildcard, or one of its tools by the toolbox's serverOf).
func declares(skill *agent.Skill, server string, serverOf func(string) (string, bool)) bool {
	return slices.ContainsFunc(skill.AllowedTools, func(n string) bool {
		return entryServer(n, serverOf) == server
	})
}

// entryServer is the MCP server an allowed-tools entry or a tool name
// belongs to ("" for none): a wildcard's, or the toolbox's record of the
// tool (serverOf), not a prefix of the name, which a server name of more
// than 48 characters loses (agent.MCPToolName).
func entryServer(n string, serverOf func(string) (string, bool)) string {
	if s, ok := agent.MCPServerWildcard(n); ok {
		return s
	}
	s, _ := serverOf(n)
	return s
}

// withoutServers drops the tools of servers from specs, by the servers the
// toolbox records.
func withoutServers(specs []agent.ToolSpec, servers []string, tb *tools.Toolbox) []agent.ToolSpec {
	if len(servers) == 0 {
		return specs
	}
	serverOf := tb.ServerOf()
	return slices.DeleteFunc(specs, func(s agent.ToolSpec) bool {
		server, ok := serverOf(s.Name)
		return ok && slices.Contains(servers, server)
	})
}

// leftOutPrompt tells the model which servers it goes without.
func leftOutPrompt(servers []string) string {
	if len(servers) == 0 {
		return ""
	}
	return "\n\nNot offered to you: the tools of the MCP server(s) " + strings.Join(servers, ", ") +
		", which the user has not connected. If the task needs them, say so: the user connects them on the Connections page."
}

// waitForConnections makes the run wait for its user to connect the
// servers of waits, before its next model call.
func (rt *Runtime) waitForConnections(ctx context.Context, jobID int64, a StepArgs, t db.Thread, waits []db.ConnectionWait) error {
	err := rt.commit(ctx, jobID, a, func(ctx context.Context, tx pgx.Tx) error {
		if err := db.WaitForConnections(ctx, tx, t.ID, t.UserID, waits); err != nil {
			return err
		}
		return rt.endRun(ctx, tx, t.ID, db.StatusWaiting, "")
	})
	if err != nil {
		return err
	}
	rt.recheck(ctx, t.UserID, waits)
	return nil
}

// refusedCall makes the run wait for its user to connect nc.Server after
// the server refused call c (401, or no token could be had): the call did
// not run, so it is ready again, to run once the run resumes.
func (rt *Runtime) refusedCall(ctx context.Context, jobID int64, a StepArgs, userID int64, c db.ToolCallRow, nc *agent.NeedsConnection) error {
	waits := []db.ConnectionWait{{Server: nc.Server, Secret: nc.Secret, Reason: nc.Reason}}
	err := rt.commit(ctx, jobID, a, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := db.SetToolCallState(ctx, tx, c.ID, db.CallReady, db.CallRunning); err != nil {
			return err
		}
		if err := db.WaitForConnections(ctx, tx, a.ThreadID, userID, waits); err != nil {
			return err
		}
		return rt.endRun(ctx, tx, a.ThreadID, db.StatusWaiting, "")
	})
	if err != nil {
		return err
	}
	rt.recheck(ctx, userID, waits)
	return nil
}

// recheck looks again, after a wait committed, at the connections it
// waits for: one made since the step looked, whose ConnectionReady came
// before the wait was there to end, resumes the run now.
func (rt *Runtime) recheck(ctx context.Context, userID int64, waits []db.ConnectionWait) {
	// Not the step's context: the run's resume is a new step job of its
	// own (advance), never this job's chained step.
	bg, cancel := context.WithTimeout(context.WithoutCancel(context.Background()), 30*time.Second)
	defer cancel()
	for _, w := range waits {
		if err := rt.cfg.SignIns.Credentialed(bg, rt.cfg.Credentials, userID, w.Server); err != nil {
			continue
		}
		if err := rt.ConnectionReady(bg, userID, w.Server); err != nil {
			rt.cfg.Logger.WarnContext(ctx, "resume a run connected meanwhile", "server", w.Server, "user_id", userID, "err", err)
		}
	}
}

// ConnectionReady resumes every run of userID that waits for a connection
// to server (docs/mcp.md): called once the person connected it or entered
// the secret it waited for. The waits end and the runs that wait for
// nothing else resume in one transaction: a run resumes once, whoever
// calls this and however often.
func (rt *Runtime) ConnectionReady(ctx context.Context, userID int64, server string) error {
	return db.InTx(ctx, rt.requestPool(), func(ctx context.Context, tx pgx.Tx) error {
		ids, err := db.EndConnectionWaits(ctx, tx, userID, server)
		if err != nil {
			return err
		}
		slices.Sort(ids) // lock in one order
		for _, id := range ids {
			s, err := db.LockRun(ctx, tx, id)
			if err != nil {
				return err
			}
			if s.Status != db.StatusWaiting {
				continue // cancelled meanwhile
			}
			more, err := db.WaitsForMore(ctx, tx, id)
			if err != nil {
				return err
			}
			if more {
				continue // it resumes when the last wait ends
			}
			t, err := db.GetRunThread(ctx, tx, id)
			if err != nil {
				return err
			}
			if err := rt.advance(ctx, tx, id); err != nil {
				return fmt.Errorf("resume thread %d: %w", id, err)
			}
			if err := rt.resumeParent(ctx, tx, t); err != nil {
				return err
			}
		}
		return nil
	})
}

// ConnectionSweepArgs queue a sweep that resumes the runs waiting for a
// connection or a ${user:NAME} value their user has since made or entered
// (SweepConnectionWaits).
type ConnectionSweepArgs struct{}

// Kind is River's name for the job.
func (ConnectionSweepArgs) Kind() string { return "sweep_connection_waits" }

// ConnectionSweepWorker runs SweepConnectionWaits on the elected leader,
// every Config.ScheduleEvery.
type ConnectionSweepWorker struct {
	river.WorkerDefaults[ConnectionSweepArgs]
	rt *Runtime
}

// Work resumes the runs whose connection is there by now.
func (w *ConnectionSweepWorker) Work(ctx context.Context, _ *river.Job[ConnectionSweepArgs]) error {
	_, err := w.rt.SweepConnectionWaits(ctx)
	return err
}

// sweepBatch bounds the waits one sweep looks at.
const sweepBatch = 100

// SweepConnectionWaits resumes the runs waiting for a connection (or a
// ${user:NAME} value) that their user made since the wait began, whose
// ConnectionReady was lost: the callback's process died, or a crash came
// between a step's wait and its recheck. Each pair is confirmed with
// Credentialed (no request to the server) before ConnectionReady, which
// resumes each run once. It returns how many pairs it resumed.
func (rt *Runtime) SweepConnectionWaits(ctx context.Context) (int, error) {
	if rt.cfg.SignIns == nil || rt.cfg.Credentials == nil {
		return 0, nil
	}
	ws, err := db.SweepableWaits(ctx, rt.cfg.Pool, sweepBatch)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, w := range ws {
		if err := rt.cfg.SignIns.Credentialed(ctx, rt.cfg.Credentials, w.UserID, w.Server); err != nil {
			continue
		}
		if err := rt.ConnectionReady(ctx, w.UserID, w.Server); err != nil {
			errs = append(errs, fmt.Errorf("resume %s for user %d: %w", w.Server, w.UserID, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// Missing is what a skill lacks to start (Toolbox.Missing) but the tools of
// the servers each user signs in to: those are listed once the user has
// connected the server, and until then the run waits for it. The servers
// its connections name that no MCP server in use has (not configured, or
// turned off, or failing to load) are missing too, in one phrase that
// Toolbox.Needs passes on as it is ("the MCP server crm configured
// (Settings → MCP servers; the skill's connections name it)"): nobody
// could connect them, so the skill is not offered and its start is refused
// in those words, instead of its runs going without them.
func (rt *Runtime) Missing(s *agent.Skill) []string {
	missing := rt.cfg.Tools.Missing(s)
	if rt.cfg.SignIns == nil {
		return missing
	}
	if rt.cfg.Credentials != nil && len(missing) > 0 {
		signIn := rt.cfg.SignIns.SignInServers()
		serverOf := rt.cfg.Tools.ServerOf()
		missing = slices.DeleteFunc(missing, func(n string) bool {
			server := entryServer(n, serverOf)
			return server != "" && slices.Contains(signIn, server)
		})
	}
	if why := rt.unconfigured(s, missing); why != "" {
		missing = append(missing, why)
	}
	return missing
}

// unconfigured says which servers s's connections name that no MCP server
// in use has, but those already among missing (allowed-tools naming them
// too), as a phrase for "needs ..."; "" for none.
func (rt *Runtime) unconfigured(s *agent.Skill, missing []string) string {
	if len(s.Connections) == 0 {
		return ""
	}
	inUse := rt.cfg.SignIns.ServerNames()
	var names []string
	for _, c := range s.Connections {
		if slices.Contains(inUse, c) || slices.Contains(missing, "mcp__"+c) || slices.Contains(missing, "mcp__"+c+"__*") {
			continue
		}
		names = append(names, c)
	}
	switch n := len(names); n {
	case 0:
		return ""
	case 1:
		return "the MCP server " + names[0] + " configured (Settings → MCP servers; the skill's connections name it)"
	default:
		return "the MCP servers " + strings.Join(names[:n-1], ", ") + " and " + names[n-1] +
			" configured (Settings → MCP servers; the skill's connections name them)"
	}
}
