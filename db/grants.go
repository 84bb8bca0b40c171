package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Grant sources.
const (
	GrantFromEnv      = "env"      // PIZZA_GRANTS or <data root>/grants.json, rewritten at start
	GrantFromSettings = "settings" // managed by an admin on the settings page
)

// FolderGrant lets agents reach a host folder: read-only unless Writable.
// Grants are the server's, not a user's: an admin manages them.
type FolderGrant struct {
	ID        int64     `db:"id"`
	Path      string    `db:"path"`
	Writable  bool      `db:"writable"`
	Source    string    `db:"source"`
	CreatedBy *int64    `db:"created_by"`
	CreatedAt time.Time `db:"created_at"`
	UpdatedAt time.Time `db:"updated_at"`
}

// GrantSpec is a grant as configured: an absolute, clean folder path.
type GrantSpec struct {
	Path     string `json:"path"`
	Writable bool   `json:"writable"`
}

// ErrGrantExists is returned when the folder is granted already.
var ErrGrantExists = errors.New("that folder is granted already")

const grantColumns = `id, path, writable, source, created_by, created_at, updated_at`

// ListGrants returns every folder grant, by path.
func ListGrants(ctx context.Context, q Querier) ([]FolderGrant, error) {
	gs, err := all[FolderGrant](q.Query(ctx, `SELECT `+grantColumns+` FROM folder_grants ORDER BY path`))
	if err != nil {
		return nil, fmt.Errorf("list folder grants: %w", err)
	}
	return gs, nil
}

// AddGrant grants a folder from the settings page. The caller checks that
// the path is an absolute, clean directory path.
func AddGrant(ctx context.Context, q Querier, path string, writable bool, by int64) (FolderGrant, error) {
	g, err := one[FolderGrant](q.Query(ctx, `INSERT INTO folder_grants (path, writable, source, created_by)
		VALUES ($1, $2, 'settings', $3) RETURNING `+grantColumns, path, writable, by))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return FolderGrant{}, ErrGrantExists
	}
	if err != nil {
		return FolderGrant{}, fmt.Errorf("add folder grant: %w", err)
	}
	return g, nil
}

// SetGrantWritable changes whether a settings grant is writable. Grants from
// the environment are changed there, so they are db.ErrNotFound here.
func SetGrantWritable(ctx context.Context, q Querier, id int64, writable bool) (FolderGrant, error) {
	g, err := one[FolderGrant](q.Query(ctx, `UPDATE folder_grants SET writable = $2, updated_at = now()
		WHERE id = $1 AND source = 'settings' RETURNING `+grantColumns, id, writable))
	if err != nil {
		return FolderGrant{}, fmt.Errorf("change folder grant %d: %w", id, err)
	}
	return g, nil
}

// DeleteGrant revokes a settings grant (grants from the environment are
// db.ErrNotFound: they are revoked there).
func DeleteGrant(ctx context.Context, q Querier, id int64) (FolderGrant, error) {
	g, err := one[FolderGrant](q.Query(ctx, `DELETE FROM folder_grants WHERE id = $1 AND source = 'settings'
		RETURNING `+grantColumns, id))
	if err != nil {
		return FolderGrant{}, fmt.Errorf("delete folder grant %d: %w", id, err)
	}
	return g, nil
}

// SyncEnvGrants makes the environment's grants exactly specs: those no
// longer configured are revoked, the others added or updated. A folder the
// settings page granted too becomes the environment's (the configuration
// file wins, as it is read at every start).
func SyncEnvGrants(ctx context.Context, q Querier, specs []GrantSpec) error {
	paths := make([]string, len(specs))
	for i, s := range specs {
		paths[i] = s.Path
	}
	if _, err := q.Exec(ctx, `DELETE FROM folder_grants WHERE source = 'env' AND NOT (path = ANY ($1::text[]))`, paths); err != nil {
		return fmt.Errorf("sync folder grants: %w", err)
	}
	for _, s := range specs {
		if _, err := q.Exec(ctx, `INSERT INTO folder_grants (path, writable, source) VALUES ($1, $2, 'env')
			ON CONFLICT (path) DO UPDATE SET writable = EXCLUDED.writable, source = 'env', updated_at = now()`,
			s.Path, s.Writable); err != nil {
			return fmt.Errorf("sync folder grant %s: %w", s.Path, err)
		}
	}
	return nil
}

// HostWrite records a file an agent wrote through a grant.
type HostWrite struct {
	ID        int64     `db:"id"`
	ThreadID  int64     `db:"thread_id"`
	UserID    int64     `db:"user_id"`
	Path      string    `db:"path"`
	Size      int64     `db:"size"`
	SHA256    string    `db:"sha256"`
	Created   bool      `db:"created"`
	CreatedAt time.Time `db:"created_at"`
	// UserName names the thread's owner.
	UserName string `db:"user_name"`
}

const hostWriteSelect = `SELECT w.id, w.thread_id, w.user_id, w.path, w.size, w.sha256, w.created, w.created_at,
	coalesce(nullif(u.name, ''), u.email, '') AS user_name
	FROM host_writes w JOIN users u ON u.id = w.user_id `

// RecordHostWrite adds a write to the record of the thread's run.
func RecordHostWrite(ctx context.Context, q Querier, w HostWrite) error {
	_, err := q.Exec(ctx, `INSERT INTO host_writes (thread_id, user_id, path, size, sha256, created)
		VALUES ($1, $2, $3, $4, $5, $6)`, w.ThreadID, w.UserID, w.Path, w.Size, w.SHA256, w.Created)
	if err != nil {
		return fmt.Errorf("record host write: %w", err)
	}
	return nil
}

// ListHostWrites returns the files written by the runs of one of the user's
// threads, oldest first.
func ListHostWrites(ctx context.Context, q Querier, userID, threadID int64) ([]HostWrite, error) {
	ws, err := all[HostWrite](q.Query(ctx, hostWriteSelect+`WHERE w.user_id = $1 AND w.thread_id = $2 ORDER BY w.id`, userID, threadID))
	if err != nil {
		return nil, fmt.Errorf("list host writes: %w", err)
	}
	return ws, nil
}

// RecentHostWrites returns the newest writes through grants by anyone's
// runs, newest first: the admins' record of what agents changed on the host.
func RecentHostWrites(ctx context.Context, q Querier, limit int) ([]HostWrite, error) {
	ws, err := all[HostWrite](q.Query(ctx, hostWriteSelect+`ORDER BY w.id DESC LIMIT $1`, limit))
	if err != nil {
		return nil, fmt.Errorf("recent host writes: %w", err)
	}
	return ws, nil
}
