package db

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Attachment is a file attached to a thread, owned by the thread's user.
type Attachment struct {
	ID       int64  `db:"id"`
	UserID   int64  `db:"user_id"`
	ThreadID int64  `db:"thread_id"`
	Name     string `db:"name"`
	// ContentType is sniffed from the content (with the file name deciding
	// between kinds of text), never the client's word.
	ContentType string    `db:"content_type"`
	Size        int64     `db:"size"`
	SHA256      string    `db:"sha256"`
	CreatedAt   time.Time `db:"created_at"`
	// Pages is a PDF's page count; nil for other files and for a PDF whose
	// pages could not be counted (broken or encrypted).
	Pages *int `db:"pages"`
	// Content is filled by GetAttachment and Attach only.
	Content []byte `db:"-"`
}

// Attachment limits.
const (
	MaxAttachmentSize       = 20 << 20 // bytes in one file
	MaxAttachmentsPerThread = 50
	maxAttachmentName       = 255
)

// AttachmentError is a refused attachment, with a message for the user.
type AttachmentError struct {
	Msg string
	// TooLarge marks a file over MaxAttachmentSize, or one that does not
	// fit in the user's storage quota (HTTP 413).
	TooLarge bool
	// Quota is the refusal of a file that does not fit in the user's
	// storage quota; nil otherwise.
	Quota *QuotaError
}

func (e *AttachmentError) Error() string { return e.Msg }

// Unwrap exposes the QuotaError of a file refused by the quota.
func (e *AttachmentError) Unwrap() error {
	if e.Quota == nil {
		return nil
	}
	return e.Quota
}

const attachmentColumns = `id, user_id, thread_id, name, content_type, size, sha256, created_at, pages`

// Attach stores the file read from r as an attachment of one of the user's
// threads, in q (a transaction when the thread is created with it, so a
// failed upload leaves no thread behind). It reads at most
// MaxAttachmentSize+1 bytes. declaredType is the client's Content-Type; it
// is only used for binary files the content does not identify (a .docx is
// a zip to the sniffer). A thread of another user is db.ErrNotFound.
func Attach(ctx context.Context, q Querier, userID, threadID int64, name, declaredType string, r io.Reader) (Attachment, error) {
	content, err := io.ReadAll(io.LimitReader(r, MaxAttachmentSize+1))
	if err != nil {
		return Attachment{}, fmt.Errorf("read attachment: %w", err)
	}
	if len(content) > MaxAttachmentSize {
		return Attachment{}, &AttachmentError{Msg: fmt.Sprintf("%s is larger than %d MB", CleanAttachmentName(name), MaxAttachmentSize>>20), TooLarge: true}
	}
	name = CleanAttachmentName(name)
	if err := checkQuota(ctx, q, userID, int64(len(content))); err != nil {
		var qe *QuotaError
		if errors.As(err, &qe) {
			return Attachment{}, &AttachmentError{Msg: fmt.Sprintf("%s cannot be attached: %s", name, qe), TooLarge: true, Quota: qe}
		}
		return Attachment{}, err
	}
	sum := sha256.Sum256(content)
	a, err := one[Attachment](q.Query(ctx, `
		INSERT INTO attachments (user_id, thread_id, name, content_type, size, sha256, content)
		SELECT t.user_id, t.id, $3, $4, $5, $6, $7
		FROM threads t
		WHERE t.user_id = $1 AND t.id = $2
		  AND (SELECT count(*) FROM attachments a WHERE a.thread_id = t.id) < $8
		RETURNING `+attachmentColumns,
		userID, threadID, name, SniffContentType(name, declaredType, content), len(content),
		hex.EncodeToString(sum[:]), content, MaxAttachmentsPerThread))
	if errors.Is(err, ErrNotFound) {
		// Either the thread is not the user's or it is full: tell which.
		if _, terr := GetThread(ctx, q, userID, threadID); terr != nil {
			return Attachment{}, terr
		}
		return Attachment{}, &AttachmentError{Msg: fmt.Sprintf("a thread holds at most %d attachments", MaxAttachmentsPerThread)}
	}
	if err != nil {
		return Attachment{}, fmt.Errorf("store attachment: %w", err)
	}
	a.Content = content
	return a, nil
}

// SetAttachmentPages records the page count of one of the user's PDFs.
func SetAttachmentPages(ctx context.Context, q Querier, userID, id int64, pages int) error {
	if _, err := q.Exec(ctx, `UPDATE attachments SET pages = $3 WHERE user_id = $1 AND id = $2`, userID, id, pages); err != nil {
		return fmt.Errorf("set pages of attachment %d: %w", id, err)
	}
	return nil
}

// CleanAttachmentName keeps the last element of a client's file name,
// without control characters, at most 255 bytes; "attachment" when nothing
// is left.
func CleanAttachmentName(name string) string {
	name = strings.ReplaceAll(name, `\`, "/")
	name = path.Base(strings.TrimSpace(name))
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return -1
		}
		return r
	}, name)
	name = strings.TrimSpace(name)
	for len(name) > maxAttachmentName {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if name == "" || name == "." || name == "/" || name == ".." {
		return "attachment"
	}
	return name
}

// textTypes names the text formats told apart by the file's extension,
// which the content sniffer sees as plain text.
var textTypes = map[string]string{
	".md":       "text/markdown; charset=utf-8",
	".markdown": "text/markdown; charset=utf-8",
	".csv":      "text/csv; charset=utf-8",
	".json":     "application/json",
	".yaml":     "application/yaml",
	".yml":      "application/yaml",
}

// SniffContentType decides an attachment's type from its first bytes. The
// file's extension tells kinds of text apart; the client's declared type is
// used only when the content is unrecognised binary, and never when it
// claims a type a browser would run or render as a page.
func SniffContentType(name, declared string, content []byte) string {
	sniffed := http.DetectContentType(content)
	ext := strings.ToLower(path.Ext(name))
	if strings.HasPrefix(sniffed, "text/plain") {
		if t, ok := textTypes[ext]; ok {
			return t
		}
		return sniffed
	}
	if sniffed == "application/octet-stream" || sniffed == "application/zip" {
		if mt, _, err := mime.ParseMediaType(declared); err == nil && mt != sniffed && safeDeclared(mt) {
			return mt
		}
	}
	return sniffed
}

// safeDeclared accepts a declared binary type that a browser would not run:
// no text, HTML, script, XML (SVG) or multipart types.
func safeDeclared(mt string) bool {
	if strings.HasPrefix(mt, "text/") || strings.HasPrefix(mt, "multipart/") {
		return false
	}
	for _, bad := range []string{"html", "xml", "script", "svg"} {
		if strings.Contains(mt, bad) {
			return false
		}
	}
	return strings.HasPrefix(mt, "application/") || strings.HasPrefix(mt, "image/") ||
		strings.HasPrefix(mt, "audio/") || strings.HasPrefix(mt, "video/") || strings.HasPrefix(mt, "font/")
}

// IsPDF reports whether the attachment is a PDF (by its sniffed type).
func (a Attachment) IsPDF() bool {
	mt, _, _ := mime.ParseMediaType(a.ContentType)
	return mt == "application/pdf"
}

// IsText reports whether an attachment's type is text the model can read
// inline.
func (a Attachment) IsText() bool {
	mt, _, _ := mime.ParseMediaType(a.ContentType)
	return strings.HasPrefix(mt, "text/") || mt == "application/json" || mt == "application/yaml"
}

// ListAttachments returns the attachments of a thread the user may read, in
// the order they were attached, without their content.
func ListAttachments(ctx context.Context, q Querier, userID, threadID int64) ([]Attachment, error) {
	as, err := all[Attachment](q.Query(ctx, `SELECT `+attachmentColumns+`
		FROM attachments t WHERE thread_id = $2 AND `+readableParent("$1", "$2")+` ORDER BY id`, userID, threadID))
	if err != nil {
		return nil, fmt.Errorf("list attachments of thread %d: %w", threadID, err)
	}
	return as, nil
}

// GetAttachment returns an attachment of a thread the user may read, with
// its content.
func GetAttachment(ctx context.Context, q Querier, userID, id int64) (Attachment, error) {
	var a Attachment
	err := q.QueryRow(ctx, `SELECT id, user_id, thread_id, name, content_type, size, sha256, created_at, pages, content
		FROM attachments WHERE id = $2 AND (user_id = $1 OR pizza_thread_role(thread_id, $1) IS NOT NULL)`, userID, id).
		Scan(&a.ID, &a.UserID, &a.ThreadID, &a.Name, &a.ContentType, &a.Size, &a.SHA256, &a.CreatedAt, &a.Pages, &a.Content)
	if isNoRows(err) {
		return Attachment{}, ErrNotFound
	}
	if err != nil {
		return Attachment{}, fmt.Errorf("get attachment %d: %w", id, err)
	}
	return a, nil
}

// AttachmentText returns the content as text when it is valid UTF-8 (a BOM
// dropped), and false otherwise.
func AttachmentText(content []byte) (string, bool) {
	content = bytes.TrimPrefix(content, []byte("\xef\xbb\xbf"))
	if !utf8.Valid(content) {
		return "", false
	}
	return string(content), true
}

// ThreadImages returns, with their content, the first limit attachments of
// one of the user's threads whose type is one of types and whose size is at
// most maxSize, in the order they were attached. The runtime uses it to
// show a thread's images to the model.
func ThreadImages(ctx context.Context, q Querier, userID, threadID int64, types []string, maxSize int64, limit int) ([]Attachment, error) {
	rows, err := q.Query(ctx, `SELECT id, user_id, thread_id, name, content_type, size, sha256, created_at, content
		FROM attachments
		WHERE user_id = $1 AND thread_id = $2 AND content_type = ANY($3) AND size <= $4
		ORDER BY id LIMIT $5`, userID, threadID, types, maxSize, limit)
	if err != nil {
		return nil, fmt.Errorf("images of thread %d: %w", threadID, err)
	}
	defer rows.Close()
	var as []Attachment
	for rows.Next() {
		var a Attachment
		if err := rows.Scan(&a.ID, &a.UserID, &a.ThreadID, &a.Name, &a.ContentType, &a.Size, &a.SHA256, &a.CreatedAt, &a.Content); err != nil {
			return nil, fmt.Errorf("images of thread %d: %w", threadID, err)
		}
		as = append(as, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("images of thread %d: %w", threadID, err)
	}
	return as, nil
}
