package handlers

import (
	"context"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
)

// Deleting threads, from the thread page, the bulk actions and the API.
// A thread goes with everything that hangs on it: messages, tool calls,
// attachments, scratch files, the run_js journal and its sub-agents
// (db.DeleteThreads). A thread whose run is going is refused (409), never
// cancelled on the user's behalf: deleting is final, so the person first
// stops the run (Cancel) and then deletes what it left. A waiting, failed,
// cancelled or finished run deletes at once.

// errDeleteRunning refuses deleting a thread whose run is going.
var errDeleteRunning = httpError{http.StatusConflict, "The run is still going: cancel it first, then delete the thread."}

// errDeleteSubagent refuses deleting a sub-agent's thread on its own.
var errDeleteSubagent = httpError{http.StatusConflict, "This is a sub-agent's thread: it is deleted with the thread that delegated to it."}

// deleteThreads deletes the user's threads ids in one transaction.
func (h *Handler) deleteThreads(ctx context.Context, userID int64, ids []int64) (db.ThreadDeletion, error) {
	var d db.ThreadDeletion
	err := db.InTx(ctx, h.pool, func(ctx context.Context, tx pgx.Tx) (err error) {
		d, err = db.DeleteThreads(ctx, tx, userID, ids)
		return err
	})
	return d, err
}

// deleteOne deletes the thread of the path: a 404 when the user cannot
// read it, a 403 when it is shared with them (ownerOnly), a 409 while its
// run goes or for a sub-agent's thread.
func (h *Handler) deleteOne(ctx context.Context, userID, id int64) error {
	t, err := db.GetThread(ctx, h.pool, userID, id)
	if err != nil {
		return err
	}
	if err := ownerOnly(userID, t, "delete"); err != nil {
		return err
	}
	if t.ParentThreadID != nil {
		return errDeleteSubagent
	}
	d, err := h.deleteThreads(ctx, userID, []int64{id})
	if err != nil {
		return err
	}
	if len(d.Running) > 0 {
		return errDeleteRunning
	}
	if len(d.Deleted) == 0 {
		return db.ErrNotFound // deleted meanwhile by another request
	}
	return nil
}

// deleteThread is POST /threads/{id}/delete, from the thread page: the
// user goes back to the list the form names in "return".
func (h *Handler) deleteThread(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if err := h.deleteOne(ctx, userFrom(ctx).ID, id); err != nil {
		return err
	}
	return seeOther(w, r, localURL(r.PostForm.Get("return"), "/inbox/all"))
}

// apiDeleteThread is DELETE /api/v1/threads/{id}: 204 when deleted, 404
// when the user cannot read it, 403 when it is shared with them, 409 while
// the run goes or for a sub-agent.
func (h *Handler) apiDeleteThread(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := apiThreadID(r)
	if err != nil {
		return err
	}
	if err := decodeNoBody(w, r); err != nil {
		return err
	}
	if err := h.deleteOne(ctx, userFrom(ctx).ID, id); err != nil {
		return threadErr(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// bulkDeleteMessage says what a bulk delete did, and what it kept.
func bulkDeleteMessage(d db.ThreadDeletion) (kind, msg string) {
	msg = "Deleted " + threadCount(len(d.Deleted)) + "."
	if len(d.Running) > 0 {
		return "error", fmt.Sprintf("%s Kept %s whose run is still going: cancel it first.", msg, threadCount(len(d.Running)))
	}
	return "ok", msg
}
