package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
	"pizzabot/tools"
	"pizzabot/views"
)

// grantNotices are the confirmations after a change, by the done parameter.
var grantNotices = map[string]string{
	"granted": "Folder granted.",
	"changed": "Grant changed.",
	"revoked": "Grant revoked.",
}

// showGrants is the admins' folder grants page.
func (h *Handler) showGrants(w http.ResponseWriter, r *http.Request) error {
	p, err := h.grantsPage(r)
	if err != nil {
		return err
	}
	p.Notice = grantNotices[r.URL.Query().Get("done")]
	return h.render(w, r, http.StatusOK, views.GrantsPage(p))
}

func (h *Handler) grantsPage(r *http.Request) (views.Grants, error) {
	ctx := r.Context()
	nav, err := h.loadNav(ctx, r, userFrom(ctx))
	if err != nil {
		return views.Grants{}, err
	}
	p := views.Grants{Nav: nav, Now: h.now(), DataRoot: h.dataRoot}
	gs, err := db.ListGrants(ctx, h.pool)
	if err != nil {
		return views.Grants{}, err
	}
	for _, g := range gs {
		row := views.GrantRow{FolderGrant: g}
		if fi, err := os.Stat(g.Path); err != nil {
			row.Problem = "The folder cannot be reached now: " + sysErrText(err)
		} else if !fi.IsDir() {
			row.Problem = "This is no longer a folder."
		}
		p.Grants = append(p.Grants, row)
	}
	if p.Writes, err = db.RecentHostWrites(ctx, h.pool, 50); err != nil {
		return views.Grants{}, err
	}
	return p, nil
}

func sysErrText(err error) string {
	if u := errors.Unwrap(err); u != nil {
		return u.Error()
	}
	return err.Error()
}

// addGrant grants a folder.
func (h *Handler) addGrant(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	field := views.Field{Value: r.PostForm.Get("path")}
	writable := r.PostForm.Get("writable") == "true"
	path, err := tools.CheckGrantPath(field.Value)
	if err == nil && tools.NewProtected(h.dataRoot).Contains(path) {
		err = fmt.Errorf("%s is inside the server's data folder, which agents must not reach", path)
	}
	if err == nil {
		err = h.audited(ctx, "grant.add", fmt.Sprintf("%s (%s)", path, strings.ToLower(views.GrantModeText(writable))), func(ctx context.Context, tx pgx.Tx) error {
			_, err := db.AddGrant(ctx, tx, path, writable, userFrom(ctx).ID)
			return err
		})
		if err == nil {
			return seeOther(w, r, "/settings/grants?done=granted")
		}
		if !errors.Is(err, db.ErrGrantExists) {
			return err
		}
	}
	p, perr := h.grantsPage(r)
	if perr != nil {
		return perr
	}
	field.Error = err.Error()
	p.Path, p.Writable = field, writable
	return h.render(w, r, http.StatusUnprocessableEntity, views.GrantsPage(p))
}

// setGrantWritable makes a grant writable or read-only.
func (h *Handler) setGrantWritable(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	writable := r.PostForm.Get("writable") == "true"
	err = h.audited(ctx, "grant.change", fmt.Sprintf("grant %d %s", id, strings.ToLower(views.GrantModeText(writable))), func(ctx context.Context, tx pgx.Tx) error {
		_, err := db.SetGrantWritable(ctx, tx, id, writable)
		return err
	})
	if err != nil {
		return err
	}
	return seeOther(w, r, "/settings/grants?done=changed")
}

// deleteGrant revokes a grant.
func (h *Handler) deleteGrant(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	err = h.audited(ctx, "grant.revoke", fmt.Sprintf("grant %d", id), func(ctx context.Context, tx pgx.Tx) error {
		_, err := db.DeleteGrant(ctx, tx, id)
		return err
	})
	if err != nil {
		return err
	}
	return seeOther(w, r, "/settings/grants?done=revoked")
}
