package db

import (
	"context"
	"fmt"
	"time"
)

// ScratchFile is a file of a thread's scratch space.
type ScratchFile struct {
	Path      string    `db:"path"`
	Size      int64     `db:"size"`
	UpdatedAt time.Time `db:"updated_at"`
}

// ListScratch lists a thread's scratch files by path.
func ListScratch(ctx context.Context, q Querier, threadID int64) ([]ScratchFile, error) {
	fs, err := all[ScratchFile](q.Query(ctx, `SELECT path, octet_length(content)::bigint AS size, updated_at
		FROM scratch_files WHERE thread_id = $1 ORDER BY path`, threadID))
	if err != nil {
		return nil, fmt.Errorf("list scratch files: %w", err)
	}
	return fs, nil
}

// ReadScratch returns the content of a scratch file.
func ReadScratch(ctx context.Context, q Querier, threadID int64, path string) (string, error) {
	var content string
	err := q.QueryRow(ctx, `SELECT content FROM scratch_files WHERE thread_id = $1 AND path = $2`, threadID, path).Scan(&content)
	if isNoRows(err) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("read scratch file: %w", err)
	}
	return content, nil
}

// ScratchFullError refuses a new scratch file to a thread that holds as
// many as it may.
type ScratchFullError struct{ Limit int }

func (e *ScratchFullError) Error() string {
	return fmt.Sprintf("the scratch space holds at most %d files", e.Limit)
}

// WriteScratch creates or replaces a scratch file. A write that grows the
// thread's user's storage past their quota is refused with a QuotaError;
// with maxFiles > 0, a new file in a thread that already holds maxFiles is
// refused with a ScratchFullError. What it needs to know of the thread
// (its owner, the file's size now, how many files it holds) is one query.
func WriteScratch(ctx context.Context, q Querier, threadID int64, path, content string, maxFiles int) error {
	var userID, files int64
	var old *int64
	err := q.QueryRow(ctx, `SELECT t.user_id,
		(SELECT octet_length(s.content) FROM scratch_files s WHERE s.thread_id = t.id AND s.path = $2),
		CASE WHEN $3 > 0 THEN (SELECT count(*) FROM scratch_files s WHERE s.thread_id = t.id) ELSE 0 END
		FROM threads t WHERE t.id = $1`, threadID, path, maxFiles).Scan(&userID, &old, &files)
	if isNoRows(err) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("write scratch file: %w", err)
	}
	if old == nil && maxFiles > 0 && files >= int64(maxFiles) {
		return &ScratchFullError{Limit: maxFiles}
	}
	if err := checkQuota(ctx, q, userID, int64(len(content))-deref(old)); err != nil {
		return err
	}
	_, err = q.Exec(ctx, `INSERT INTO scratch_files (thread_id, path, content) VALUES ($1, $2, $3)
		ON CONFLICT (thread_id, path) DO UPDATE SET content = EXCLUDED.content, updated_at = now()`,
		threadID, path, content)
	if err != nil {
		return fmt.Errorf("write scratch file: %w", err)
	}
	return nil
}

func deref(n *int64) int64 {
	if n == nil {
		return 0
	}
	return *n
}

// ScratchDigests returns the MD5 (hex) of those of paths that are scratch
// files of the thread: whether a file holds a given content, without
// reading it back.
func ScratchDigests(ctx context.Context, q Querier, threadID int64, paths []string) (map[string]string, error) {
	rows, err := q.Query(ctx, `SELECT path, md5(content) FROM scratch_files WHERE thread_id = $1 AND path = ANY($2)`, threadID, paths)
	if err != nil {
		return nil, fmt.Errorf("scratch file digests: %w", err)
	}
	defer rows.Close()
	sums := map[string]string{}
	for rows.Next() {
		var p, sum string
		if err := rows.Scan(&p, &sum); err != nil {
			return nil, fmt.Errorf("scratch file digests: %w", err)
		}
		sums[p] = sum
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("scratch file digests: %w", err)
	}
	return sums, nil
}
