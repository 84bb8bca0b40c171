package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
	"pizzabot/refusal"
)

// Upload is a file sent with a prompt, attached to the thread it starts.
type Upload struct {
	// Name is the client's file name (cleaned by db.Attach).
	Name string
	// ContentType is the client's declared type, used only for binary
	// files the content does not identify (see db.SniffContentType).
	ContentType string
	// Body is read once, at most db.MaxAttachmentSize+1 bytes.
	Body io.Reader
}

// StartTx is Start inside the caller's transaction: the thread, its first
// message and its first step job commit together with whatever else the
// caller writes, such as the record of the schedule fire or webhook delivery
// that started the run, and with the files of req.Files. A refusal
// (*refusal.Error) is returned before anything is written, except for a
// refused file (field "files"), which the caller's rollback undoes.
func (rt *Runtime) StartTx(ctx context.Context, tx pgx.Tx, user db.User, req StartRequest) (db.Thread, error) {
	req.Prompt = strings.TrimSpace(req.Prompt)
	if req.Prompt == "" {
		return db.Thread{}, refusal.New(refusal.Invalid, "prompt", "the prompt is empty")
	}
	if len(req.Prompt) > MaxPrompt {
		return db.Thread{}, refusal.New(refusal.TooLarge, "prompt", "the prompt is longer than %d KB", MaxPrompt>>10)
	}
	if len(req.Files) > db.MaxAttachmentsPerThread {
		return db.Thread{}, refusal.New(refusal.Invalid, "files", "a thread holds at most %d attachments", db.MaxAttachmentsPerThread)
	}
	model := "" // a skill's pinned model, else the default (StartThread)
	if req.Skill != "" {
		if err := rt.checkSkill(req.Skill); err != nil {
			return db.Thread{}, err
		}
		model = rt.skillModel(req.Skill)
	}
	if req.Title == "" {
		req.Title = db.TitleFromPrompt(req.Prompt)
	}
	if req.FolderID != nil {
		if _, err := db.GetFolder(ctx, tx, user.ID, *req.FolderID); err != nil {
			return db.Thread{}, err
		}
	}
	nt := db.NewThread{
		UserID: user.ID, FolderID: req.FolderID, Title: req.Title, Skill: req.Skill,
		Model: model, TriggerKind: req.TriggerKind, TriggerAt: req.TriggerAt, TriggerRef: req.TriggerRef,
	}
	if len(req.Files) == 0 {
		// Without files the prompt is known: the thread (with the default
		// model of the settings), its message and its run's generation
		// are one statement (every run pays for its start).
		t, gen, err := db.StartThread(ctx, tx, nt, req.Prompt, rt.cfg.DefaultModel)
		if err != nil {
			return db.Thread{}, err
		}
		if _, err := rt.client.InsertTx(ctx, tx, StepArgs{ThreadID: t.ID, Gen: gen}, nil); err != nil {
			return db.Thread{}, fmt.Errorf("queue step of thread %d: %w", t.ID, err)
		}
		return t, nil
	}
	if nt.Model == "" {
		nt.Model = rt.defaultModel(ctx, tx)
	}
	t, err := db.CreateThread(ctx, tx, nt)
	if err != nil {
		return db.Thread{}, err
	}
	prompt := req.Prompt
	for _, f := range req.Files {
		a, err := db.Attach(ctx, tx, user.ID, t.ID, f.Name, f.ContentType, f.Body)
		var ae *db.AttachmentError
		if errors.As(err, &ae) {
			kind := refusal.Invalid
			if ae.TooLarge {
				kind = refusal.TooLarge
			}
			return db.Thread{}, refusal.New(kind, "files", "%s", ae.Msg)
		}
		if err != nil {
			return db.Thread{}, err
		}
		if prompt == req.Prompt {
			prompt += "\n"
		}
		prompt += fmt.Sprintf("\nAttached: %s (#%d)", a.Name, a.ID)
	}
	if _, err := db.AddMessage(ctx, tx, db.Message{ThreadID: t.ID, Role: db.RoleUser, Content: prompt}); err != nil {
		return db.Thread{}, err
	}
	if err := rt.advance(ctx, tx, t.ID); err != nil {
		return db.Thread{}, err
	}
	return t, nil
}
