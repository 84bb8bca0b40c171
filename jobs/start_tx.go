package jobs

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
)

// StartTx is Start inside the caller's transaction: the thread, its first
// message and its first step job commit together with whatever else the
// caller writes, such as the record of the schedule fire or webhook delivery
// that started the run. A refusal (*UserError) is returned before anything
// is written.
func (rt *Runtime) StartTx(ctx context.Context, tx pgx.Tx, user db.User, req StartRequest) (db.Thread, error) {
	req.Prompt = strings.TrimSpace(req.Prompt)
	if req.Prompt == "" {
		return db.Thread{}, userErr(400, "the prompt is empty")
	}
	if len(req.Prompt) > MaxPrompt {
		return db.Thread{}, userErr(413, "the prompt is longer than %d KB", MaxPrompt>>10)
	}
	if req.Skill != "" {
		if err := rt.checkSkill(req.Skill); err != nil {
			return db.Thread{}, err
		}
	}
	if req.Title == "" {
		req.Title = db.TitleFromPrompt(req.Prompt)
	}
	if req.FolderID != nil {
		if _, err := db.GetFolder(ctx, tx, user.ID, *req.FolderID); err != nil {
			return db.Thread{}, err
		}
	}
	t, err := db.CreateThread(ctx, tx, db.NewThread{
		UserID: user.ID, FolderID: req.FolderID, Title: req.Title, Skill: req.Skill,
		Model: rt.defaultModel(ctx), TriggerKind: req.TriggerKind, TriggerAt: req.TriggerAt, TriggerRef: req.TriggerRef,
	})
	if err != nil {
		return db.Thread{}, err
	}
	if _, err := db.AddMessage(ctx, tx, db.Message{ThreadID: t.ID, Role: db.RoleUser, Content: req.Prompt}); err != nil {
		return db.Thread{}, err
	}
	if err := rt.advance(ctx, tx, t.ID); err != nil {
		return db.Thread{}, err
	}
	return t, nil
}
