package db

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// When nobody can decide a waiting call (docs/team.md). A call routed to a
// group nobody in it has signed in to, to a disabled person, or asking for
// four eyes on a thread nobody else may decide in, would wait forever
// without a word. It still waits (nothing approves a call by itself), but
// everyone who reads the thread is told why, at once, and how it gets out:
// the owner cancels, a share or a sign-in makes a decider, or an admin
// decides in the approvers' place (jobs.Runtime.Decide with an override).
//
// The deciders of a call are pizza_decide_check's rule turned around:
// for a call naming approvers, the enabled users who satisfy every set of
// them (pizza_routed_ok); for one naming none, the thread's owner and the
// members of its shared folder; and for an escalated call, also the users
// it was escalated to (migration 0049); under four eyes, never whoever
// started the run. Users are those who have signed in at least once: a person a share
// or a route names by email, or a group, is nobody until then.

// Kinds of undecidable call (Undecidable.Kind).
const (
	// StuckFourEyes: no approvers are named, four eyes keep the starter
	// out, and nobody else may decide in the thread: it is in no shared
	// folder, or no other member of it has signed in.
	StuckFourEyes = "four_eyes"
	// StuckRouted: no enabled user is in every set of approvers (but the
	// starter, under four eyes).
	StuckRouted = "routed"
	// StuckOwner: no approvers, no four eyes, but the thread's owner is
	// disabled and no member of its folder may decide.
	StuckOwner = "owner"
)

// Undecidable is a waiting call nobody could decide right now.
type Undecidable struct {
	Kind string
	// Reason says why, to the reader ("you" is them): "deploy-oncall has
	// no member other than you who has signed in (four eyes: whoever
	// started the run may not decide)".
	Reason string
	// ReaderStarted reports that four eyes keep the reader out: they
	// started the run and the call asks for four eyes, so it is not
	// theirs to decide even as an admin.
	ReaderStarted bool
	// Folder is the name of the thread's folder, "" when it is in none.
	Folder string
}

// decidersSQL selects the enabled users who may decide waiting call c of
// top-level thread r (SQL aliases) right now: what pizza_decide_check
// says 'ok' to, as a set. Each branch is an index lookup (the users'
// principals, their key, a folder's shares), so that a listing may ask it
// of the few waiting calls on its page (markUndecidable).
const decidersSQL = `SELECT u.id FROM users u
		WHERE c.escalated_to <> '{}' AND u.principals && c.escalated_to AND NOT u.disabled
		  AND NOT (c.distinct_approver AND u.id = coalesce(r.started_by, r.user_id))
		UNION ALL
		SELECT u.id FROM users u
		WHERE c.approvers <> '[]' AND u.principals && pizza_approver_keys(c.approvers) AND NOT u.disabled
		  AND pizza_routed_ok(c.approvers, c.distinct_approver, coalesce(r.started_by, r.user_id), u.id, u.principals)
		UNION ALL
		SELECT u.id FROM users u
		WHERE c.approvers = '[]' AND u.id = r.user_id AND NOT u.disabled
		  AND NOT (c.distinct_approver AND u.id = coalesce(r.started_by, r.user_id))
		UNION ALL
		SELECT u.id FROM folder_shares s JOIN users u ON u.principals @> ARRAY[s.principal]
		WHERE c.approvers = '[]' AND s.folder_id = r.folder_id AND s.role = 'member' AND NOT u.disabled
		  AND NOT (c.distinct_approver AND u.id = coalesce(r.started_by, r.user_id))`

// undecidableSQL is, for each waiting call c of calls (a FROM clause
// naming the calls c, joined by key) that nobody may decide, what explains
// it: who started the run, the thread's owner and folder, and for each set
// of approvers how many enabled users other than the starter are in it,
// whether the starter is, and how many disabled users are.
func undecidableSQL(calls string) string {
	const starter = `coalesce(r.started_by, r.user_id)`
	return `
	SELECT c.id, c.approvers, c.distinct_approver, ` + starter + ` AS starter, r.user_id AS owner,
		coalesce(nullif(su.name, ''), su.email, '') AS starter_name,
		coalesce(nullif(ou.name, ''), ou.email, '') AS owner_name, coalesce(ou.disabled, true) AS owner_disabled,
		r.folder_id IS NOT NULL AS in_folder, coalesce(f.name, '') AS folder,
		(SELECT count(*) FROM folder_shares s WHERE s.folder_id = r.folder_id AND s.role = 'member') AS member_shares,
		(SELECT count(DISTINCT m.id) FROM folder_shares s JOIN users m ON m.principals @> ARRAY[s.principal]
		 WHERE s.folder_id = r.folder_id AND s.role = 'member' AND m.disabled AND m.id <> ` + starter + `) AS members_disabled,
		coalesce((SELECT jsonb_agg(jsonb_build_object(
				'others', (SELECT count(*) FROM users u
					WHERE u.principals && x.keys AND NOT u.disabled AND u.id <> ` + starter + `),
				'starter', EXISTS (SELECT 1 FROM users u
					WHERE u.id = ` + starter + ` AND u.principals && x.keys AND NOT u.disabled),
				'disabled', (SELECT count(*) FROM users u WHERE u.principals && x.keys AND u.disabled)) ORDER BY x.n)
			FROM (SELECT p.n, ARRAY(SELECT jsonb_array_elements_text(p.s)) AS keys
			      FROM jsonb_array_elements(c.approvers) WITH ORDINALITY p(s, n)) x), '[]') AS sets
	FROM ` + calls + `
	JOIN threads k ON k.id = c.thread_id
	JOIN threads r ON r.id = coalesce(k.parent_thread_id, k.id)
	LEFT JOIN users su ON su.id = ` + starter + `
	LEFT JOIN users ou ON ou.id = r.user_id
	LEFT JOIN folders f ON f.id = r.folder_id
	WHERE c.state IN ('pending', 'unknown') AND NOT EXISTS (` + decidersSQL + `)`
}

// threadCallsSQL is a FROM clause of the calls c of thread id (an SQL
// expression) and of its sub-agents: lookups by thread
// (tool_calls_thread_idx, threads_parent_idx), never a scan of the waiting
// calls.
func threadCallsSQL(id string) string {
	return `(SELECT c.* FROM tool_calls c WHERE c.thread_id = ` + id + `
		UNION ALL
		SELECT c.* FROM threads s JOIN tool_calls c ON c.thread_id = s.id WHERE s.parent_thread_id = ` + id + `) c`
}

// approverSet is what undecidableSQL says of one set of approvers.
type approverSet struct {
	Others   int64 `json:"others"`   // enabled users in it, the starter aside
	Starter  bool  `json:"starter"`  // the starter is in it
	Disabled int64 `json:"disabled"` // disabled users in it
}

type undecidableRow struct {
	ID              int64         `db:"id"`
	Approvers       [][]string    `db:"approvers"`
	Distinct        bool          `db:"distinct_approver"`
	Starter         int64         `db:"starter"`
	Owner           int64         `db:"owner"`
	StarterName     string        `db:"starter_name"`
	OwnerName       string        `db:"owner_name"`
	OwnerDisabled   bool          `db:"owner_disabled"`
	InFolder        bool          `db:"in_folder"`
	Folder          string        `db:"folder"`
	MemberShares    int64         `db:"member_shares"`
	MembersDisabled int64         `db:"members_disabled"`
	Sets            []approverSet `db:"sets"`
}

// UndecidableCalls returns, for each waiting call of a thread and of its
// sub-agents that nobody could decide right now, why, worded for the
// reader userID. One query, in the caller's snapshot (ReadThreadView reads
// it with the rest of the thread). The caller has checked that the reader
// may read the thread.
func UndecidableCalls(ctx context.Context, q Querier, userID, threadID int64) (map[int64]Undecidable, error) {
	rows, err := all[undecidableRow](q.Query(ctx, undecidableSQL(threadCallsSQL("$1::bigint")), threadID))
	if err != nil {
		return nil, fmt.Errorf("undecidable calls of thread %d: %w", threadID, err)
	}
	out := make(map[int64]Undecidable, len(rows))
	for _, r := range rows {
		out[r.ID] = r.explain(userID)
	}
	return out, nil
}

// CallUndecidable says whether nobody could decide a waiting call right
// now, and why (worded for userID); false when someone could, or when it
// does not wait.
func CallUndecidable(ctx context.Context, q Querier, userID, callID int64) (Undecidable, bool, error) {
	r, err := one[undecidableRow](q.Query(ctx, undecidableSQL(`tool_calls c`)+` AND c.id = $1`, callID))
	switch {
	case errors.Is(err, ErrNotFound):
		return Undecidable{}, false, nil
	case err != nil:
		return Undecidable{}, false, fmt.Errorf("who may decide call %d: %w", callID, err)
	}
	return r.explain(userID), true, nil
}

// explain words why nobody may decide the call, for reader.
func (r undecidableRow) explain(reader int64) Undecidable {
	u := Undecidable{Folder: r.Folder, ReaderStarted: r.Distinct && r.Starter == reader}
	who := r.StarterName
	if r.Starter == reader {
		who = "you"
	}
	switch {
	case len(r.Approvers) > 0:
		u.Kind, u.Reason = StuckRouted, r.routedReason(who)
	case r.Distinct:
		u.Kind = StuckFourEyes
		because := "four eyes: " + who + " started this run, so someone else must decide it, but nobody else may: "
		switch {
		case !r.InFolder:
			u.Reason = because + "the thread is in no folder, so it is shared with nobody"
		case r.Owner != r.Starter && r.OwnerDisabled:
			u.Reason = because + "the owner's account (" + r.OwnerName + ") is disabled and no other member of the folder " + r.Folder + " has signed in"
		case r.MemberShares == 0:
			u.Reason = because + "its folder " + r.Folder + " is not shared with anyone as a member"
		case r.MembersDisabled > 0:
			u.Reason = because + "the other members of its folder " + r.Folder + " who have signed in are disabled"
		default:
			u.Reason = because + "no other member of its folder " + r.Folder + " has signed in"
		}
	default:
		u.Kind = StuckOwner
		u.Reason = "the owner's account (" + r.OwnerName + ") is disabled, and no member of its folder may decide"
	}
	return u
}

// routedReason says why no enabled user is in every set of approvers:
// the first set with nobody (but the starter, under four eyes) in it, or
// that nobody is in all of them.
func (r undecidableRow) routedReason(who string) string {
	for i, set := range r.Approvers {
		if i >= len(r.Sets) {
			break
		}
		st := r.Sets[i]
		if st.Others > 0 || st.Starter && !r.Distinct {
			continue
		}
		names := WaitingFor([][]string{set})
		person := len(set) == 1 && strings.HasPrefix(set[0], "user:")
		switch {
		case st.Starter && person && who == "you":
			return "four eyes: the only approver named is you, and you started this run"
		case st.Starter && person:
			return "four eyes: the only approver named, " + names + ", started this run"
		case st.Starter:
			return names + " has no member other than " + who + " who has signed in (four eyes: whoever started the run may not decide)"
		case person && st.Disabled > 0:
			return "the approver " + names + " is disabled"
		case person:
			return "the approver " + names + " has not signed in (with that email verified)"
		case st.Disabled > 0:
			return "everyone in " + names + " who has signed in is disabled"
		case len(set) > 1:
			return "nobody in " + names + " has signed in"
		}
		return names + " has no member who has signed in"
	}
	var names []string
	for _, set := range r.Approvers {
		names = append(names, WaitingFor([][]string{set}))
	}
	if r.Distinct {
		return "nobody who has signed in, apart from " + who + " (four eyes: whoever started the run may not decide), is in " + strings.Join(names, " and also in ")
	}
	return "nobody who has signed in is in " + strings.Join(names, " and also in ")
}

// markUndecidable sets Undecidable on the waiting threads of ts, read by
// a person, that are not in their Action queue and have a waiting call (of
// their own or of a sub-agent) nobody could decide right now. A thread in
// their Action has a call they can decide: its row and notification are
// theirs already, and the Action queue, all such threads, costs nothing
// more. One query, and none when no thread of ts is left; a query of its
// own, not a column of threadColumns, so that the listings and the steps do
// not plan it.
func markUndecidable(ctx context.Context, q Querier, ts []Thread) error {
	var waiting []int64
	for _, t := range ts {
		if t.Status == StatusWaiting && !t.InAction {
			waiting = append(waiting, t.ID)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	stuck, err := ids(q.Query(ctx, `SELECT DISTINCT x.id FROM unnest($1::bigint[]) x(id)
		CROSS JOIN LATERAL (SELECT c.* FROM `+threadCallsSQL("x.id")+`) c
		JOIN threads k ON k.id = c.thread_id
		JOIN threads r ON r.id = coalesce(k.parent_thread_id, k.id)
		WHERE c.state IN ('pending', 'unknown') AND NOT EXISTS (`+decidersSQL+`)`, waiting))
	if err != nil {
		return fmt.Errorf("undecidable threads: %w", err)
	}
	for i := range ts {
		ts[i].Undecidable = slices.Contains(stuck, ts[i].ID)
	}
	return nil
}
