package tools

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/db"
)

// The attachment tools read the files attached to the run's own thread
// (never another thread's, never another user's). They only read the
// database, in the transaction that records their result.

// maxAttachmentRead is the most text read_attachment returns in one call.
const maxAttachmentRead = 100 << 10

func attachmentTools() []Tool {
	return []Tool{
		{
			Spec: agent.ToolSpec{
				Name: "list_attachments",
				Description: "List the files attached to this thread (by the user with their prompt, or by the webhook that started the run): " +
					"id, name, type and size of each. Read one with read_attachment.",
				Parameters: schema(`{"type":"object","properties":{},"additionalProperties":false}`),
			},
			Tx: func(ctx context.Context, tx pgx.Tx, run Run, _ map[string]any) (string, error) {
				as, err := db.ListAttachments(ctx, tx, run.UserID, run.ThreadID)
				if err != nil {
					return "", err
				}
				if len(as) == 0 {
					return "This thread has no attachments.", nil
				}
				var b strings.Builder
				for _, a := range as {
					fmt.Fprintf(&b, "#%d\t%s\t%s\t%d bytes\n", a.ID, a.Name, a.ContentType, a.Size)
				}
				return strings.TrimRight(b.String(), "\n"), nil
			},
		},
		{
			Spec: agent.ToolSpec{
				Name: "read_attachment",
				Description: "Read a file attached to this thread, by its id from list_attachments. Text files (plain text, Markdown, CSV, JSON, code) " +
					"are returned as text, up to 100 KB per call: pass offset (in bytes) to read further. " +
					"PDFs are returned as their text, page by page, up to 50 pages or about 100 KB per call: pass page to read further " +
					"(a scanned PDF has no text; an encrypted one cannot be read). " +
					"Images (PNG, JPEG, GIF, WebP up to 5 MB, at most 8) are shown to you with the user's first message instead.",
				Parameters: schema(`{"type":"object","properties":{
					"id":{"type":"integer","minimum":1,"description":"The attachment's id."},
					"offset":{"type":"integer","minimum":0,"description":"Text files: byte offset to start reading at (default 0)."},
					"page":{"type":"integer","minimum":1,"description":"PDFs: the first page to read (default 1)."}},
					"required":["id"],"additionalProperties":false}`),
			},
			// A Call, not a Tx tool: reading a PDF runs PDFium for up to
			// pdfTimeout (seconds on the first PDF of a process, while it
			// compiles), and no transaction may be held that long (a long
			// transaction holds back every live update in the cluster).
			// It only reads, so a crash mid-call simply runs it again.
			Idempotent: true,
			Call: func(ctx context.Context, run Run, args map[string]any) (string, error) {
				host, err := run.host()
				if err != nil {
					return "", err
				}
				q := host.Pool()
				id := intArg(args, "id", 0, 0, 1<<62)
				a, err := db.GetAttachment(ctx, q, run.UserID, id)
				if errors.Is(err, db.ErrNotFound) || (err == nil && a.ThreadID != run.ThreadID) {
					return "", fmt.Errorf("this thread has no attachment #%d (list_attachments lists them)", id)
				}
				if err != nil {
					return "", err
				}
				shown := false
				if ShowsImage(a) { // and among the first MaxImages? (images.go)
					as, err := db.ListAttachments(ctx, q, run.UserID, run.ThreadID)
					if err != nil {
						return "", err
					}
					shown = slices.Contains(ShownImageIDs(as), a.ID)
				}
				if a.IsPDF() {
					t, text, err := readPDFAttachment(ctx, a, int(intArg(args, "page", 1, 1, 1<<31-1)))
					if err == nil && a.Pages == nil {
						// Uploaded before PDFs were counted, or by a
						// webhook: the thread page shows the count from now on.
						err = db.SetAttachmentPages(ctx, q, run.UserID, a.ID, t.Pages)
					}
					return text, err
				}
				return readAttachment(a, shown, intArg(args, "offset", 0, 0, 1<<62))
			},
		},
	}
}

// readAttachment renders an attachment for the model. shown tells that the
// attachment is an image shown to the model with the first message.
func readAttachment(a db.Attachment, shown bool, offset int64) (string, error) {
	mt, _, _ := mime.ParseMediaType(a.ContentType)
	switch {
	case shown:
		return fmt.Sprintf("%s is an image (%s, %d bytes): the image was shown to the model with the first message; look at it there "+
			"(unless your instructions say that this model cannot see images).", a.Name, mt, a.Size), nil
	case strings.HasPrefix(mt, "image/"):
		return "", fmt.Errorf("%s is an image (%s, %d bytes) that is not shown to the model (only PNG, JPEG, GIF and WebP images up to %d MB, at most %d per thread, are), so its content cannot be read; tell the user",
			a.Name, mt, a.Size, MaxImageSize>>20, MaxImages)
	}
	text, ok := db.AttachmentText(a.Content)
	if !ok {
		return "", fmt.Errorf("%s is a binary file (%s, %d bytes), not text: it cannot be read", a.Name, a.ContentType, a.Size)
	}
	if offset > int64(len(text)) {
		return "", fmt.Errorf("offset %d is past the end of %s (%d bytes)", offset, a.Name, len(text))
	}
	start := int(offset)
	for start > 0 && start < len(text) && text[start]&0xC0 == 0x80 {
		start++ // to the next character
	}
	end := min(start+maxAttachmentRead, len(text))
	for end < len(text) && end > start && text[end]&0xC0 == 0x80 {
		end--
	}
	header := fmt.Sprintf("%s (%s, %d bytes)", a.Name, a.ContentType, len(text))
	if start > 0 || end < len(text) {
		header += fmt.Sprintf(", bytes %d to %d", start, end)
	}
	body := text[start:end]
	if end < len(text) {
		body += fmt.Sprintf("\n… (%d more bytes: read_attachment with offset %d)", len(text)-end, end)
	}
	return header + ":\n\n" + body, nil
}
