package handlers

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"pizzabot/db"
	"pizzabot/notify"
	"pizzabot/views"
)

// listFolders shows the folders page, where folders are renamed and deleted.
func (h *Handler) listFolders(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	nav, err := h.loadNav(ctx, r, userFrom(ctx))
	if err != nil {
		return err
	}
	x, err := h.folderExtras(ctx, userFrom(ctx).ID)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, views.FoldersPage(foldersPage(nav, x, 0, views.Field{})))
}

// folderExtras is what the folders page shows of each folder beyond its
// name: its shares and its chat webhooks (folder_webhooks.go).
type folderExtras struct {
	shares     map[int64][]db.Share
	webhooks   map[int64][]notify.Webhook
	webhooksOn bool
}

func (h *Handler) folderExtras(ctx context.Context, userID int64) (folderExtras, error) {
	x := folderExtras{webhooksOn: h.notifyWebhooks != nil}
	var err error
	if x.shares, err = db.ListAllShares(ctx, h.pool, userID); err != nil {
		return x, err
	}
	if x.webhooksOn {
		if x.webhooks, err = notify.FolderWebhooks(ctx, h.pool, userID); err != nil {
			return x, err
		}
	}
	return x, nil
}

// foldersPage lists nav's folders with their shares and webhooks, the
// folder id showing the submitted rename field.
func foldersPage(nav views.Nav, x folderExtras, id int64, field views.Field) views.Folders {
	p := views.Folders{Nav: nav}
	for _, f := range nav.Folders {
		row := views.FolderEdit{Folder: f, Name: views.Field{Value: f.Name}, Shares: x.shares[f.ID],
			WebhooksOn: x.webhooksOn, Webhooks: x.webhooks[f.ID]}
		if f.ID == id {
			row.Name = field
		}
		p.Rows = append(p.Rows, row)
	}
	return p
}

// createFolder creates a folder from the sidebar's form. htmx gets the
// sidebar back, with the new folder or with the error next to the field;
// without JavaScript the user returns to their page, or on error sees the
// folders page with the error in the sidebar.
func (h *Handler) createFolder(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	if err := parseForm(w, r); err != nil {
		return err
	}
	field := views.Field{Value: r.PostForm.Get("name")}
	_, msg, err := saveFolderName(field.Value, func(name string) error {
		_, err := db.CreateFolder(ctx, h.pool, user.ID, name)
		return err
	})
	if err != nil {
		return err
	}
	field.Error = msg
	status := http.StatusOK
	if field.Error != "" {
		status = http.StatusUnprocessableEntity
	} else if !wantsFragment(r) {
		return seeOther(w, r, localURL(r.PostForm.Get("return"), "/inbox/all"))
	}
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	if field.Error != "" {
		nav.NewFolder = field
	}
	if wantsFragment(r) {
		return h.render(w, r, status, views.Sidebar(nav, false))
	}
	x, err := h.folderExtras(ctx, user.ID)
	if err != nil {
		return err
	}
	return h.render(w, r, status, views.FoldersPage(foldersPage(nav, x, 0, views.Field{})))
}

// renameFolder renames a folder from its row on the folders page.
func (h *Handler) renameFolder(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if _, err := db.GetFolder(ctx, h.pool, user.ID, id); err != nil {
		return err
	}
	field := views.Field{Value: r.PostForm.Get("name")}
	name, msg, err := saveFolderName(field.Value, func(name string) error {
		return db.RenameFolder(ctx, h.pool, user.ID, id, name)
	})
	if err != nil {
		return err
	}
	field.Error = msg
	if field.Error == "" && !wantsFragment(r) {
		return seeOther(w, r, "/folders")
	}
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	if field.Error == "" {
		field.Value = name
	}
	x, err := h.folderExtras(ctx, user.ID)
	if err != nil {
		return err
	}
	page := foldersPage(nav, x, id, field)
	if !wantsFragment(r) {
		return h.render(w, r, http.StatusUnprocessableEntity, views.FoldersPage(page))
	}
	var row views.FolderEdit
	for _, fr := range page.Rows {
		if fr.Folder.ID == id {
			row = fr
		}
	}
	if field.Error != "" {
		return h.render(w, r, http.StatusUnprocessableEntity, views.FolderRow(row))
	}
	return h.render(w, r, http.StatusOK, views.FolderRow(row), views.Sidebar(nav, true))
}

// deleteFolder deletes a folder; its threads stay and leave the folder.
func (h *Handler) deleteFolder(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	f, err := db.GetFolder(ctx, h.pool, user.ID, id)
	if err != nil {
		return err
	}
	if err := db.DeleteFolder(ctx, h.pool, user.ID, id); err != nil {
		return err
	}
	if !wantsFragment(r) {
		return seeOther(w, r, "/folders")
	}
	// htmx removes the folder's row itself (hx-swap="delete"); the sidebar
	// and a note come out of band.
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK,
		views.Sidebar(nav, true),
		views.FlashOOB("ok", "Deleted the folder “"+f.Name+"”. Its threads are still in All."))
}

// saveFolderName cleans a submitted folder name and saves it. A name the
// user must change (empty, too long, taken) comes back as msg, for the field.
func saveFolderName(raw string, save func(name string) error) (name, msg string, err error) {
	name, err = db.CleanFolderName(raw)
	if err != nil {
		// CleanFolderName's errors are written for the user.
		m := err.Error()
		return "", strings.ToUpper(m[:1]) + m[1:] + ".", nil
	}
	err = save(name)
	if errors.Is(err, db.ErrFolderExists) {
		return "", "You already have a folder with that name.", nil
	}
	return name, "", err
}
