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

// WriteScratch creates or replaces a scratch file. A write that grows the
// thread's user's storage past their quota is refused with a QuotaError.
func WriteScratch(ctx context.Context, q Querier, threadID int64, path, content string) error {
	var userID, old int64
	err := q.QueryRow(ctx, `SELECT t.user_id,
		coalesce((SELECT octet_length(s.content) FROM scratch_files s WHERE s.thread_id = t.id AND s.path = $2), 0)
		FROM threads t WHERE t.id = $1`, threadID, path).Scan(&userID, &old)
	if isNoRows(err) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("write scratch file: %w", err)
	}
	if err := checkQuota(ctx, q, userID, int64(len(content))-old); err != nil {
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
