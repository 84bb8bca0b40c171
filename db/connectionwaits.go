package db

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Connection waits (migration 0040): a run waits while its user has not
// connected an MCP server each user signs in to that it needs.

// ConnectionWait is a run's wait for its user to connect Server.
type ConnectionWait struct {
	// ThreadID is the waiting run's thread: the thread itself, or one of
	// its sub-agents.
	ThreadID int64  `json:"thread_id"`
	Server   string `json:"server"`
	// Secret is the NAME of the ${user:NAME} value of Server the run
	// waits for its user to enter (migration 0053), never the value; ""
	// for an OAuth sign-in.
	Secret string `json:"secret"`
	Reason string `json:"reason"`
}

// Description says what the run waits for, for the person: "Connect
// github to continue", or for a ${user:NAME} value "Enter your API_KEY for
// crm to continue".
func (w ConnectionWait) Description() string {
	if w.Secret != "" {
		return "Enter your " + w.Secret + " for " + w.Server + " to continue"
	}
	return "Connect " + w.Server + " to continue"
}

// ConnectURL is where the run's user connects the server, coming back to
// thread threadID (the page they are shown the wait on).
func (w ConnectionWait) ConnectURL(threadID int64) string {
	return "/connect/" + url.PathEscape(w.Server) + "?return=" + url.QueryEscape("/threads/"+strconv.FormatInt(threadID, 10))
}

// WaitForConnections records that thread threadID's run waits for userID
// to connect each server of waits (a wait already there takes the new
// reason and secret). The caller ends the run as waiting in the same transaction.
func WaitForConnections(ctx context.Context, q Querier, threadID, userID int64, waits []ConnectionWait) error {
	for _, w := range waits {
		if _, err := q.Exec(ctx, `
			INSERT INTO connection_waits (thread_id, user_id, server, secret, reason) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (thread_id, server) DO UPDATE SET secret = EXCLUDED.secret, reason = EXCLUDED.reason`,
			threadID, userID, w.Server, w.Secret, w.Reason); err != nil {
			return fmt.Errorf("record the wait for %s: %w", w.Server, err)
		}
	}
	return nil
}

// EndConnectionWaits deletes userID's waits for server and returns their
// threads. A racing caller waits for this transaction and then finds them
// gone: each wait ends once.
func EndConnectionWaits(ctx context.Context, q Querier, userID int64, server string) ([]int64, error) {
	rows, err := q.Query(ctx, `DELETE FROM connection_waits WHERE user_id = $1 AND server = $2 RETURNING thread_id`, userID, server)
	if err != nil {
		return nil, fmt.Errorf("end the waits for %s: %w", server, err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// WaitsForMore reports whether thread threadID's run waits for something
// still: another connection, a person's decision, or a budget.
func WaitsForMore(ctx context.Context, q Querier, threadID int64) (bool, error) {
	var more bool
	err := q.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM connection_waits WHERE thread_id = $1)
		OR EXISTS (SELECT 1 FROM tool_calls WHERE thread_id = $1 AND state IN ('pending', 'unknown'))
		OR EXISTS (SELECT 1 FROM budget_holds WHERE thread_id = $1)`, threadID).Scan(&more)
	if err != nil {
		return false, fmt.Errorf("read what thread %d waits for: %w", threadID, err)
	}
	return more, nil
}

// SetLeftOut records the servers a run without a skill was not offered
// because its user has not connected them, when they changed.
func SetLeftOut(ctx context.Context, q Querier, threadID int64, servers []string) error {
	if servers == nil {
		servers = []string{}
	}
	_, err := q.Exec(ctx, `UPDATE threads SET left_out = $2 WHERE id = $1 AND left_out IS DISTINCT FROM $2`, threadID, servers)
	if err != nil {
		return fmt.Errorf("record the servers left out: %w", err)
	}
	return nil
}

// QueueSetLeftOut queues SetLeftOut's update on b.
func QueueSetLeftOut(b *pgx.Batch, threadID int64, servers []string) {
	if servers == nil {
		servers = []string{}
	}
	b.Queue(`UPDATE threads SET left_out = $2 WHERE id = $1 AND left_out IS DISTINCT FROM $2`, threadID, servers)
}

// ReadyWait is a user's wait for a server that a credential was connected
// or entered for since the wait began (SweepableWaits).
type ReadyWait struct {
	UserID int64
	Server string
}

// sweepSlack is how long before a wait began a credential still counts as
// new to it: one connected between a step's look and its commit (whose
// ConnectionReady found no wait yet) is older than the wait's row.
const sweepSlack = "1 minute"

// SweepableWaits lists (user, server) pairs with a run waiting for them
// that something may resume: the user's connection to the server is
// connected and was made or refreshed since (about) the wait began, or
// they entered a ${user:NAME} value of the server since. Only new
// credentials count: a server that refuses them again (a 401) makes a new
// wait, which this does not resume until they change again.
func SweepableWaits(ctx context.Context, q Querier, limit int) ([]ReadyWait, error) {
	rows, err := q.Query(ctx, `
		SELECT DISTINCT w.user_id, w.server FROM connection_waits w
		WHERE EXISTS (SELECT 1 FROM connections c WHERE c.user_id = w.user_id AND c.server = w.server
				AND c.status = 'connected' AND c.refreshed_at > w.created_at - $2::interval)
			OR EXISTS (SELECT 1 FROM user_secrets s WHERE s.user_id = w.user_id AND s.server = w.server
				AND s.updated_at > w.created_at - $2::interval)
		ORDER BY w.user_id, w.server LIMIT $1`, limit, sweepSlack)
	if err != nil {
		return nil, fmt.Errorf("find waits to resume: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReadyWait, error) {
		var w ReadyWait
		err := r.Scan(&w.UserID, &w.Server)
		return w, err
	})
}
