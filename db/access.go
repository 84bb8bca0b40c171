package db

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Working as a team (migration 0024; docs/team.md). A person sees a thread
// as its owner, through a share of its folder, or as an approver of one of
// its calls, and is told 404 otherwise. Who they are to shares and routes
// are their principals: "user:<email>" (a verified email) and
// "group:<name>" for each group of their last sign-in's groups claim.

// Roles a person can have in a thread (pizza_thread_role).
const (
	RoleOwner    = "owner"
	RoleMember   = "member"   // a shared folder's member: reads, replies, decides
	RoleViewer   = "viewer"   // a shared folder's viewer: reads and follows live
	RoleApprover = "approver" // named on one of its calls: reads it, decides that call
)

// CanAct reports whether a role may reply to, retry or cancel a run.
func CanAct(role string) bool { return role == RoleOwner || role == RoleMember }

// Why a person may not decide a waiting call (pizza_decide_check).
const (
	DecideOK          = "ok"
	DecideDistinct    = "distinct"     // four eyes: they started the run
	DecideNotApprover = "not_approver" // routed to others
	DecideViewer      = "viewer"       // they may only read the thread
	DecideNone        = "none"         // they may not see it
)

// PrincipalName is a principal (agent.ParsePrincipal) as people read it:
// the email, or the group.
func PrincipalName(p string) string {
	_, v, _ := strings.Cut(p, ":")
	return v
}

// SharedFolder is a folder of someone else's shared with a person.
type SharedFolder struct {
	ID      int64  `db:"id"`
	OwnerID int64  `db:"owner_id"`
	Name    string `db:"name"`
	// Owner names the folder's owner.
	Owner string `db:"owner"`
	// Role is RoleMember or RoleViewer, the strongest of the shares that
	// name the person.
	Role string `db:"role"`
	// Unread counts the person's unread threads of the folder.
	Unread int64 `db:"unread"`
}

// Access is what one person may see beyond their own threads, resolved
// once per request (LoadAccess) and passed to the queue queries, which
// take its few folder ids and principals as arrays: no per-row rule.
type Access struct {
	UserID     int64
	Principals []string
	// Shared are the folders others shared with the person, by name.
	Shared []SharedFolder
	// Routed are the waiting threads with a call routed to the person
	// that is theirs to decide (pizza_routed_ok): a lookup of the few
	// waiting routed calls naming one of their principals.
	Routed []int64
}

// OwnerAccess is access to one's own threads alone: for the runtime and
// for tests of a single user's queues. Requests use LoadAccess.
func OwnerAccess(userID int64) Access { return Access{UserID: userID} }

// Folder returns the shared folder id, if it is shared with the person.
func (a Access) Folder(id int64) (SharedFolder, bool) {
	for _, f := range a.Shared {
		if f.ID == id {
			return f, true
		}
	}
	return SharedFolder{}, false
}

// Role is the person's role in a top-level thread they listed.
func (a Access) Role(t Thread) string {
	if t.UserID == a.UserID {
		return RoleOwner
	}
	if t.FolderID != nil {
		if f, ok := a.Folder(*t.FolderID); ok {
			return f.Role
		}
	}
	return RoleApprover
}

// folders returns the ids and owners of the shared folders, narrowed to
// one (0: all), and to those shared as member when members is set.
func (a Access) folders(only int64, members bool) (ids, owners []int64) {
	for _, f := range a.Shared {
		if (only == 0 || f.ID == only) && (!members || f.Role == RoleMember) {
			ids, owners = append(ids, f.ID), append(owners, f.OwnerID)
		}
	}
	return ids, owners
}

// LoadAccess resolves what a user may see beyond their own threads: their
// principals and the folders shared with them. A disabled user has none.
func LoadAccess(ctx context.Context, q Querier, userID int64) (Access, error) {
	a := Access{UserID: userID}
	rows, err := q.Query(ctx, `
		WITH u AS MATERIALIZED (
			SELECT u.id, u.principals, ARRAY(`+routedSQL("u.id", "u.principals")+` AND r.status = 'waiting') AS routed
			FROM users u WHERE u.id = $1 AND NOT u.disabled
		)
		SELECT u.principals, u.routed, f.id, f.user_id, f.name, coalesce(nullif(o.name, ''), o.email, '') AS owner, sh.role,
		       (SELECT count(*) FROM thread_unread x WHERE x.user_id = u.id AND x.folder_id = f.id) AS unread
		FROM u
		LEFT JOIN LATERAL (
			SELECT s.folder_id, CASE WHEN bool_or(s.role = 'member') THEN 'member' ELSE 'viewer' END AS role
			FROM folder_shares s WHERE s.principal = ANY (u.principals) GROUP BY s.folder_id
		) sh ON true
		LEFT JOIN folders f ON f.id = sh.folder_id AND f.user_id <> u.id
		LEFT JOIN users o ON o.id = f.user_id
		ORDER BY lower(f.name), f.id`, userID)
	if err != nil {
		return Access{}, fmt.Errorf("load access of user %d: %w", userID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			principals []string
			routed     []int64
			id, owner  *int64
			name, who  *string
			role       *string
			unread     int64
		)
		if err := rows.Scan(&principals, &routed, &id, &owner, &name, &who, &role, &unread); err != nil {
			return Access{}, fmt.Errorf("load access of user %d: %w", userID, err)
		}
		a.Principals, a.Routed = principals, routed
		if id != nil {
			a.Shared = append(a.Shared, SharedFolder{ID: *id, OwnerID: *owner, Name: *name, Owner: *who, Role: *role, Unread: unread})
		}
	}
	if err := rows.Err(); err != nil {
		return Access{}, fmt.Errorf("load access of user %d: %w", userID, err)
	}
	return a, nil
}

// Share is a folder shared with a principal.
type Share struct {
	ID        int64     `db:"id"`
	FolderID  int64     `db:"folder_id"`
	Principal string    `db:"principal"`
	Role      string    `db:"role"`
	CreatedAt time.Time `db:"created_at"`
}

// Who names the share's audience: "ana@example.com" or "group deal-desk".
func (s Share) Who() string {
	if g, ok := strings.CutPrefix(s.Principal, "group:"); ok {
		return "group " + g
	}
	return PrincipalName(s.Principal)
}

const shareColumns = `s.id, s.folder_id, s.principal, s.role, s.created_at`

// ShareFolder shares one of owner's folders with a principal (ParsePrincipal)
// as role, RoleViewer or RoleMember, or changes the role of its share.
// Another user's folder is ErrNotFound. The people it names see the
// folder's threads at once (migration 0024's access events).
func ShareFolder(ctx context.Context, q Querier, ownerID, folderID int64, principal, role string) (Share, error) {
	if role != RoleViewer && role != RoleMember {
		return Share{}, fmt.Errorf("share folder %d: unknown role %q", folderID, role)
	}
	s, err := one[Share](q.Query(ctx, `
		INSERT INTO folder_shares (folder_id, principal, role, created_by)
		SELECT f.id, $3, $4, $1 FROM folders f WHERE f.user_id = $1 AND f.id = $2
		ON CONFLICT (folder_id, principal) DO UPDATE SET role = EXCLUDED.role
		RETURNING `+strings.ReplaceAll(shareColumns, "s.", ""), ownerID, folderID, principal, role))
	if err != nil {
		return Share{}, fmt.Errorf("share folder %d: %w", folderID, err)
	}
	return s, nil
}

// ListShares returns the shares of one of owner's folders.
func ListShares(ctx context.Context, q Querier, ownerID, folderID int64) ([]Share, error) {
	ss, err := all[Share](q.Query(ctx, `SELECT `+shareColumns+` FROM folder_shares s
		JOIN folders f ON f.id = s.folder_id
		WHERE f.user_id = $1 AND s.folder_id = $2 ORDER BY s.id`, ownerID, folderID))
	if err != nil {
		return nil, fmt.Errorf("shares of folder %d: %w", folderID, err)
	}
	return ss, nil
}

// ListAllShares returns the shares of every folder of owner's, by folder.
func ListAllShares(ctx context.Context, q Querier, ownerID int64) (map[int64][]Share, error) {
	ss, err := all[Share](q.Query(ctx, `SELECT `+shareColumns+` FROM folder_shares s
		JOIN folders f ON f.id = s.folder_id
		WHERE f.user_id = $1 ORDER BY s.id`, ownerID))
	if err != nil {
		return nil, fmt.Errorf("shares of the folders of user %d: %w", ownerID, err)
	}
	out := map[int64][]Share{}
	for _, s := range ss {
		out[s.FolderID] = append(out[s.FolderID], s)
	}
	return out, nil
}

// Unshare removes a share of one of owner's folders and returns it. The
// people it named lose access at once: their queues and pages no longer
// show the folder's threads (unless another share names them), the live
// log records nothing more of those threads for them, and their open
// streams are told to render afresh (an access event).
func Unshare(ctx context.Context, q Querier, ownerID, folderID, shareID int64) (Share, error) {
	s, err := one[Share](q.Query(ctx, `DELETE FROM folder_shares s USING folders f
		WHERE f.id = s.folder_id AND f.user_id = $1 AND s.folder_id = $2 AND s.id = $3
		RETURNING `+shareColumns, ownerID, folderID, shareID))
	if err != nil {
		return Share{}, fmt.Errorf("unshare folder %d: %w", folderID, err)
	}
	return s, nil
}

// readable is the condition that user u (a SQL parameter) may read thread
// t, a row of one thread's query: its owner at the cost of a comparison,
// anyone else by pizza_thread_role.
func readable(u string) string {
	return `(t.user_id = ` + u + ` OR pizza_thread_role(t.id, ` + u + `) IS NOT NULL)`
}

// readableParent is the condition that user u may read the thread of id
// p (SQL parameters), whose sub-agents rows t are: once per query.
func readableParent(u, p string) string {
	return `(t.user_id = ` + u + ` OR (SELECT pizza_thread_role(` + p + `::bigint, ` + u + `::bigint)) IS NOT NULL)`
}

// ThreadRole returns the user's role in a thread (a sub-agent's too):
// RoleOwner, RoleMember, RoleViewer or RoleApprover; ErrNotFound when they
// may not see it.
func ThreadRole(ctx context.Context, q Querier, userID, threadID int64) (string, error) {
	var role *string
	if err := q.QueryRow(ctx, `SELECT pizza_thread_role($2, $1)`, userID, threadID).Scan(&role); err != nil {
		return "", fmt.Errorf("role in thread %d: %w", threadID, err)
	}
	if role == nil {
		return "", fmt.Errorf("role in thread %d: %w", threadID, ErrNotFound)
	}
	return *role, nil
}

// DecideChecks says, for each waiting call of a thread and of its
// sub-agents, whether the user may decide it: DecideOK or why not.
func DecideChecks(ctx context.Context, q Querier, userID, threadID int64) (map[int64]string, error) {
	rows, err := q.Query(ctx, `SELECT c.id, pizza_decide_check(c.id, $1) FROM tool_calls c
		WHERE c.thread_id IN (SELECT $2::bigint UNION ALL SELECT k.id FROM threads k WHERE k.parent_thread_id = $2)
		  AND c.state IN ('pending', 'unknown')`, userID, threadID)
	if err != nil {
		return nil, fmt.Errorf("decide checks of thread %d: %w", threadID, err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var check string
		if err := rows.Scan(&id, &check); err != nil {
			return nil, fmt.Errorf("decide checks of thread %d: %w", threadID, err)
		}
		out[id] = check
	}
	return out, rows.Err()
}

// DecideCheck says whether the user may decide one call: DecideOK or why
// not.
func DecideCheck(ctx context.Context, q Querier, userID, callID int64) (string, error) {
	var check *string
	if err := q.QueryRow(ctx, `SELECT pizza_decide_check($2, $1)`, userID, callID).Scan(&check); err != nil {
		return "", fmt.Errorf("decide check of call %d: %w", callID, err)
	}
	if check == nil {
		return DecideNone, nil
	}
	return *check, nil
}

// WaitingFor names whom a routed call waits for, as people read it:
// "deploy-oncall", "ana@example.com or bob@example.com", "deploy-oncall
// and ana@example.com"; "" when it names no approvers.
func WaitingFor(approvers [][]string) string {
	var sets []string
	for _, set := range approvers {
		names := make([]string, 0, len(set))
		for _, a := range set {
			names = append(names, PrincipalName(a))
		}
		if n := strings.Join(names, " or "); n != "" && !slices.Contains(sets, n) {
			sets = append(sets, n)
		}
	}
	return strings.Join(sets, " and ")
}
