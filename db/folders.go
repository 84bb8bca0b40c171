package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// Folder groups a user's threads. A thread in a folder still shows in the
// Unread and Action queues.
type Folder struct {
	ID        int64     `db:"id"`
	UserID    int64     `db:"user_id"`
	Name      string    `db:"name"`
	CreatedAt time.Time `db:"created_at"`
	// Threads and Unread count the folder's threads; filled by ListFolders.
	Threads int64 `db:"threads"`
	Unread  int64 `db:"unread"`
}

// ErrFolderExists is returned when the user already has a folder of that name.
var ErrFolderExists = errors.New("a folder with that name already exists")

// MaxFolderName is the longest folder name, in characters.
const MaxFolderName = 80

// CleanFolderName trims a folder name and checks it, returning a message fit
// for the user when it is unusable.
func CleanFolderName(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", errors.New("folder name is empty")
	case utf8.RuneCountInString(name) > MaxFolderName:
		return "", fmt.Errorf("folder name is longer than %d characters", MaxFolderName)
	}
	return name, nil
}

// ListFolders returns the user's folders by name, with thread counts.
func ListFolders(ctx context.Context, q Querier, userID int64) ([]Folder, error) {
	fs, err := all[Folder](q.Query(ctx, `
		SELECT f.id, f.user_id, f.name, f.created_at,
		       count(t.id) AS threads,
		       count(t.id) FILTER (WHERE t.unread AND NOT t.archived) AS unread
		FROM folders f
		LEFT JOIN threads t ON t.user_id = f.user_id AND t.folder_id = f.id
		WHERE f.user_id = $1
		GROUP BY f.id
		ORDER BY lower(f.name), f.id`, userID))
	if err != nil {
		return nil, fmt.Errorf("list folders: %w", err)
	}
	return fs, nil
}

// GetFolder returns one of the user's folders.
func GetFolder(ctx context.Context, q Querier, userID, id int64) (Folder, error) {
	f, err := one[Folder](q.Query(ctx, `
		SELECT id, user_id, name, created_at, 0::bigint AS threads, 0::bigint AS unread
		FROM folders WHERE user_id = $1 AND id = $2`, userID, id))
	if err != nil {
		return Folder{}, fmt.Errorf("get folder %d: %w", id, err)
	}
	return f, nil
}

// GetFolderByName returns the user's folder with that exact name.
func GetFolderByName(ctx context.Context, q Querier, userID int64, name string) (Folder, error) {
	f, err := one[Folder](q.Query(ctx, `
		SELECT id, user_id, name, created_at, 0::bigint AS threads, 0::bigint AS unread
		FROM folders WHERE user_id = $1 AND name = $2`, userID, name))
	if err != nil {
		return Folder{}, fmt.Errorf("get folder %q: %w", name, err)
	}
	return f, nil
}

// CreateFolder creates a folder for the user. The name must have been
// cleaned with CleanFolderName.
func CreateFolder(ctx context.Context, q Querier, userID int64, name string) (Folder, error) {
	f, err := one[Folder](q.Query(ctx, `
		INSERT INTO folders (user_id, name) VALUES ($1, $2)
		RETURNING id, user_id, name, created_at, 0::bigint AS threads, 0::bigint AS unread`, userID, name))
	if isUniqueViolation(err) {
		return Folder{}, ErrFolderExists
	}
	if err != nil {
		return Folder{}, fmt.Errorf("create folder: %w", err)
	}
	return f, nil
}

// RenameFolder renames one of the user's folders.
func RenameFolder(ctx context.Context, q Querier, userID, id int64, name string) error {
	tag, err := q.Exec(ctx, `UPDATE folders SET name = $3 WHERE user_id = $1 AND id = $2`, userID, id, name)
	if isUniqueViolation(err) {
		return ErrFolderExists
	}
	if err != nil {
		return fmt.Errorf("rename folder %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("rename folder %d: %w", id, ErrNotFound)
	}
	return nil
}

// DeleteFolder deletes one of the user's folders. Its threads are kept and
// leave the folder.
func DeleteFolder(ctx context.Context, q Querier, userID, id int64) error {
	tag, err := q.Exec(ctx, `DELETE FROM folders WHERE user_id = $1 AND id = $2`, userID, id)
	if err != nil {
		return fmt.Errorf("delete folder %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete folder %d: %w", id, ErrNotFound)
	}
	return nil
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
