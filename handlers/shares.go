package handlers

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/apiv1"
	"pizzabot/db"
)

// Sharing folders (docs/team.md). Only a folder's owner shares it, with a
// person (by email) or an identity-provider group, as viewer or member;
// every share, change and removal is in the audit log, written in the
// transaction that makes it. The people a share names see the folder's
// threads, or stop seeing them, at once: migration 0024 tells their open
// streams.

// access returns what the signed-in user may see beyond their own threads
// (db.LoadAccess), resolved once per request.
func (h *Handler) access(ctx context.Context) (db.Access, error) {
	info := requestInfoFrom(ctx)
	if info.access != nil && info.access.UserID == info.user.ID {
		return *info.access, nil
	}
	a, err := db.LoadAccess(ctx, h.pool, userFrom(ctx).ID)
	if err != nil {
		return db.Access{}, err
	}
	if info.user.ID != 0 {
		info.access = &a
	}
	return a, nil
}

func toAPIShare(s db.Share) apiv1.Share {
	return apiv1.Share{ID: s.ID, With: s.Principal, Role: s.Role, CreatedAt: s.CreatedAt.UTC().Format("2006-01-02T15:04:05Z")}
}

// share shares one of the user's folders as asked, audited.
func (h *Handler) share(ctx context.Context, folderID int64, req apiv1.ShareRequest) (db.Share, error) {
	user := userFrom(ctx)
	principal, err := agent.ParsePrincipal(req.With)
	if err != nil {
		return db.Share{}, httpError{http.StatusBadRequest, "Share with whom? " + err.Error()}
	}
	if req.Role == "" {
		req.Role = db.RoleViewer
	}
	if req.Role != db.RoleViewer && req.Role != db.RoleMember {
		return db.Share{}, httpError{http.StatusBadRequest, `The role must be "viewer" (reads and follows) or "member" (also replies and decides).`}
	}
	var s db.Share
	err = db.InTx(ctx, h.pool, func(ctx context.Context, tx pgx.Tx) error {
		f, err := db.GetFolder(ctx, tx, user.ID, folderID)
		if err != nil {
			return err
		}
		if s, err = db.ShareFolder(ctx, tx, user.ID, folderID, principal, req.Role); err != nil {
			return err
		}
		return db.AddAudit(ctx, tx, user, "folder shared", fmt.Sprintf("folder %d (%s) with %s as %s", f.ID, f.Name, s.Who(), s.Role))
	})
	return s, err
}

// unshare removes a share of one of the user's folders, audited.
func (h *Handler) unshare(ctx context.Context, folderID, shareID int64) error {
	user := userFrom(ctx)
	return db.InTx(ctx, h.pool, func(ctx context.Context, tx pgx.Tx) error {
		f, err := db.GetFolder(ctx, tx, user.ID, folderID)
		if err != nil {
			return err
		}
		s, err := db.Unshare(ctx, tx, user.ID, folderID, shareID)
		if err != nil {
			return err
		}
		return db.AddAudit(ctx, tx, user, "folder unshared", fmt.Sprintf("folder %d (%s) no longer with %s", f.ID, f.Name, s.Who()))
	})
}

// shareFolder is the folders page's share form: POST /folders/{id}/shares.
func (h *Handler) shareFolder(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if _, err := h.share(r.Context(), id, apiv1.ShareRequest{With: r.PostForm.Get("with"), Role: r.PostForm.Get("role")}); err != nil {
		return err
	}
	return seeOther(w, r, "/folders#folder-"+strconv.FormatInt(id, 10))
}

// unshareFolder is a share's remove button on the folders page:
// POST /folders/{id}/shares/{share}/delete.
func (h *Handler) unshareFolder(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	shareID, err := strconv.ParseInt(r.PathValue("share"), 10, 64)
	if err != nil {
		return notFound
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if err := h.unshare(r.Context(), id, shareID); err != nil {
		return err
	}
	return seeOther(w, r, "/folders#folder-"+strconv.FormatInt(id, 10))
}

// apiListShares: GET /api/v1/folders/{id}/shares.
func (h *Handler) apiListShares(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	user := userFrom(ctx)
	if _, err := db.GetFolder(ctx, h.pool, user.ID, id); err != nil {
		return err
	}
	ss, err := db.ListShares(ctx, h.pool, user.ID, id)
	if err != nil {
		return err
	}
	out := apiv1.ShareList{Shares: []apiv1.Share{}}
	for _, s := range ss {
		out.Shares = append(out.Shares, toAPIShare(s))
	}
	return writeJSON(w, http.StatusOK, out)
}

// apiShareFolder: POST /api/v1/folders/{id}/shares {"with": "group:x",
// "role": "member"} answers 201 with the share (a share that existed gets
// the new role).
func (h *Handler) apiShareFolder(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req apiv1.ShareRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	s, err := h.share(r.Context(), id, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, toAPIShare(s))
}

// apiUnshareFolder: DELETE /api/v1/folders/{id}/shares/{share} answers 204.
func (h *Handler) apiUnshareFolder(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	shareID, err := strconv.ParseInt(r.PathValue("share"), 10, 64)
	if err != nil {
		return notFound
	}
	if err := h.unshare(r.Context(), id, shareID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
