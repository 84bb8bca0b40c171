package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Memory is a note kept across one user's threads: the agent saves and
// searches them with its memory tools, the user reads and edits them on the
// memory page.
type Memory struct {
	ID        int64     `db:"id"`
	UserID    int64     `db:"user_id"`
	Content   string    `db:"content"`
	ThreadID  *int64    `db:"thread_id"`
	CreatedAt time.Time `db:"created_at"`
	UpdatedAt time.Time `db:"updated_at"`
	// Rank is the search relevance (higher is better); 0 outside a search.
	Rank float64 `db:"rank"`
}

// Memory limits.
const (
	MaxMemoryContent = 4000  // characters in one memory
	MaxMemories      = 10000 // memories per user
)

// ErrTooManyMemories is returned when a user's memory is full.
var ErrTooManyMemories = fmt.Errorf("the memory is full (%d memories): forget some first", MaxMemories)

const memoryColumns = `id, user_id, content, thread_id, created_at, updated_at`

// CleanMemory trims a memory's content and checks it, with a message fit for
// the user or the model when it is unusable.
func CleanMemory(content string) (string, error) {
	content = strings.TrimSpace(content)
	switch {
	case content == "":
		return "", errors.New("the memory is empty")
	case !utf8.ValidString(content):
		return "", errors.New("the memory is not valid UTF-8 text")
	case utf8.RuneCountInString(content) > MaxMemoryContent:
		return "", fmt.Errorf("the memory is longer than %d characters: keep one fact per memory", MaxMemoryContent)
	}
	return content, nil
}

// SaveMemory stores a memory of the user. Saving the same text again
// refreshes the existing memory instead of keeping a copy; created reports
// which happened. threadID names the run that saved it (nil: the user).
func SaveMemory(ctx context.Context, q Querier, userID int64, threadID *int64, content string) (m Memory, created bool, err error) {
	content, err = CleanMemory(content)
	if err != nil {
		return Memory{}, false, err
	}
	m, err = one[Memory](q.Query(ctx, `UPDATE memories SET updated_at = now()
		WHERE user_id = $1 AND content = $2
		RETURNING `+memoryColumns+`, 0::float8 AS rank`, userID, content))
	if err == nil {
		return m, false, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return Memory{}, false, fmt.Errorf("save memory: %w", err)
	}
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM memories WHERE user_id = $1`, userID).Scan(&n); err != nil {
		return Memory{}, false, fmt.Errorf("count memories: %w", err)
	}
	if n >= MaxMemories {
		return Memory{}, false, ErrTooManyMemories
	}
	m, err = one[Memory](q.Query(ctx, `INSERT INTO memories (user_id, thread_id, content)
		VALUES ($1, $2, $3) RETURNING `+memoryColumns+`, 0::float8 AS rank`, userID, threadID, content))
	if err != nil {
		return Memory{}, false, fmt.Errorf("save memory: %w", err)
	}
	return m, true, nil
}

// GetMemory returns one memory of the user.
func GetMemory(ctx context.Context, q Querier, userID, id int64) (Memory, error) {
	m, err := one[Memory](q.Query(ctx, `SELECT `+memoryColumns+`, 0::float8 AS rank
		FROM memories WHERE user_id = $1 AND id = $2`, userID, id))
	if err != nil {
		return Memory{}, fmt.Errorf("get memory %d: %w", id, err)
	}
	return m, nil
}

// UpdateMemory replaces the content of one of the user's memories.
func UpdateMemory(ctx context.Context, q Querier, userID, id int64, content string) (Memory, error) {
	content, err := CleanMemory(content)
	if err != nil {
		return Memory{}, err
	}
	m, err := one[Memory](q.Query(ctx, `UPDATE memories SET content = $3, updated_at = now()
		WHERE user_id = $1 AND id = $2
		RETURNING `+memoryColumns+`, 0::float8 AS rank`, userID, id, content))
	if err != nil {
		return Memory{}, fmt.Errorf("update memory %d: %w", id, err)
	}
	return m, nil
}

// DeleteMemory deletes one of the user's memories and returns what it held.
func DeleteMemory(ctx context.Context, q Querier, userID, id int64) (Memory, error) {
	m, err := one[Memory](q.Query(ctx, `DELETE FROM memories WHERE user_id = $1 AND id = $2
		RETURNING `+memoryColumns+`, 0::float8 AS rank`, userID, id))
	if err != nil {
		return Memory{}, fmt.Errorf("delete memory %d: %w", id, err)
	}
	return m, nil
}

// ListMemories returns the user's most recently updated memories.
func ListMemories(ctx context.Context, q Querier, userID int64, limit int) ([]Memory, error) {
	ms, err := all[Memory](q.Query(ctx, `SELECT `+memoryColumns+`, 0::float8 AS rank
		FROM memories WHERE user_id = $1 ORDER BY updated_at DESC, id DESC LIMIT $2`, userID, limit))
	if err != nil {
		return nil, fmt.Errorf("list memories: %w", err)
	}
	return ms, nil
}

// CountMemories returns how many memories the user keeps.
func CountMemories(ctx context.Context, q Querier, userID int64) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM memories WHERE user_id = $1`, userID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count memories: %w", err)
	}
	return n, nil
}

// SearchMemories returns the user's memories that match query, best first.
// It ranks a full-text search (English stemming, any of the query's words,
// ts_rank_cd) and, when that finds nothing, falls back to a substring match
// of the query and its words, so names and codes that stemming mangles are
// still found. An empty query lists the most recent memories.
func SearchMemories(ctx context.Context, q Querier, userID int64, query string, limit int) ([]Memory, error) {
	words := searchWords(query)
	if len(words) == 0 {
		return ListMemories(ctx, q, userID, limit)
	}
	ms, err := all[Memory](q.Query(ctx, `
		SELECT `+memoryColumns+`, ts_rank_cd(search, query)::float8 AS rank
		FROM memories, websearch_to_tsquery('english', $2) AS query
		WHERE user_id = $1 AND search @@ query
		ORDER BY rank DESC, updated_at DESC, id DESC
		LIMIT $3`, userID, strings.Join(words, " or "), limit))
	if err != nil {
		return nil, fmt.Errorf("search memories: %w", err)
	}
	if len(ms) > 0 {
		return ms, nil
	}
	patterns := []string{likePattern(strings.TrimSpace(query))}
	for _, w := range words {
		if utf8.RuneCountInString(w) >= 3 {
			patterns = append(patterns, likePattern(w))
		}
	}
	// Rank the fallback by how many of the patterns a memory contains.
	ms, err = all[Memory](q.Query(ctx, `
		SELECT `+memoryColumns+`,
		       (SELECT count(*) FROM unnest($2::text[]) p WHERE content ILIKE p)::float8 AS rank
		FROM memories
		WHERE user_id = $1 AND content ILIKE ANY ($2::text[])
		ORDER BY rank DESC, updated_at DESC, id DESC
		LIMIT $3`, userID, patterns, limit))
	if err != nil {
		return nil, fmt.Errorf("search memories: %w", err)
	}
	return ms, nil
}

// maxSearchWords bounds the words of a search, so a pasted page cannot make
// a query of thousands of terms.
const maxSearchWords = 32

// searchWords splits a query into words of letters and digits. Operators of
// the web search syntax are dropped: the words are joined with "or".
func searchWords(query string) []string {
	fields := strings.FieldsFunc(query, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	var words []string
	for _, f := range fields {
		if lf := strings.ToLower(f); lf == "or" || lf == "and" || lf == "not" {
			continue
		}
		words = append(words, f)
		if len(words) == maxSearchWords {
			break
		}
	}
	return words
}

// likePattern matches s anywhere, with LIKE's wildcards in s taken literally.
func likePattern(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(s) + "%"
}
