package handlers

import (
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"pizzabot/db"
	"pizzabot/views"
)

// memoryNotices are the confirmations after a change, by the done parameter
// of the redirect (so no user input is echoed).
var memoryNotices = map[string]string{
	"saved":   "Memory saved.",
	"exists":  "You already had that memory; it moved to the top.",
	"updated": "Memory updated.",
	"deleted": "Memory deleted.",
}

// maxMemoryQuery bounds a memory search, in characters.
const maxMemoryQuery = 500

// showMemory lists the user's memories, or those matching ?q=.
func (h *Handler) showMemory(w http.ResponseWriter, r *http.Request) error {
	p, err := h.memoryPage(r, strings.TrimSpace(r.URL.Query().Get("q")))
	if err != nil {
		return err
	}
	p.Notice = memoryNotices[r.URL.Query().Get("done")]
	return h.render(w, r, http.StatusOK, views.MemoryPage(p))
}

// memoryPage loads the memory page for a search.
func (h *Handler) memoryPage(r *http.Request, query string) (views.Memory, error) {
	ctx := r.Context()
	user := userFrom(ctx)
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return views.Memory{}, err
	}
	if utf8.RuneCountInString(query) > maxMemoryQuery {
		query = string([]rune(query)[:maxMemoryQuery])
	}
	p := views.Memory{Nav: nav, Now: h.now(), Query: query}
	if query != "" {
		p.Memories, err = db.SearchMemories(ctx, h.pool, user.ID, query, 50)
	} else {
		p.Memories, err = db.ListMemories(ctx, h.pool, user.ID, views.MaxMemoriesShown)
	}
	if err != nil {
		return views.Memory{}, err
	}
	if p.Total, err = db.CountMemories(ctx, h.pool, user.ID); err != nil {
		return views.Memory{}, err
	}
	return p, nil
}

// createMemory saves a memory the user wrote.
func (h *Handler) createMemory(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	if err := parseForm(w, r); err != nil {
		return err
	}
	field := views.Field{Value: r.PostForm.Get("content")}
	content, err := db.CleanMemory(field.Value)
	if err == nil {
		var created bool
		_, created, err = db.SaveMemory(ctx, h.pool, user.ID, nil, content)
		if err == nil {
			done := "saved"
			if !created {
				done = "exists"
			}
			return seeOther(w, r, "/memory?done="+done)
		}
		if !errors.Is(err, db.ErrTooManyMemories) {
			return err
		}
	}
	field.Error = err.Error()
	p, perr := h.memoryPage(r, "")
	if perr != nil {
		return perr
	}
	p.New = field
	return h.render(w, r, http.StatusUnprocessableEntity, views.MemoryPage(p))
}

// updateMemory replaces the content of one of the user's memories.
func (h *Handler) updateMemory(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if _, err := db.GetMemory(ctx, h.pool, user.ID, id); err != nil {
		return err
	}
	field := views.Field{Value: r.PostForm.Get("content")}
	if _, err := db.CleanMemory(field.Value); err != nil {
		field.Error = err.Error()
		p, perr := h.memoryPage(r, "")
		if perr != nil {
			return perr
		}
		p.EditID, p.Edit = id, field
		return h.render(w, r, http.StatusUnprocessableEntity, views.MemoryPage(p))
	}
	if _, err := db.UpdateMemory(ctx, h.pool, user.ID, id, field.Value); err != nil {
		return err
	}
	return seeOther(w, r, withDone(localURL(r.PostForm.Get("return"), "/memory"), "updated"))
}

// deleteMemory deletes one of the user's memories.
func (h *Handler) deleteMemory(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if _, err := db.DeleteMemory(ctx, h.pool, userFrom(ctx).ID, id); err != nil {
		return err
	}
	return seeOther(w, r, withDone(localURL(r.PostForm.Get("return"), "/memory"), "deleted"))
}

// withDone adds the done parameter that names a confirmation to a local URL.
func withDone(u, done string) string {
	if strings.Contains(u, "?") {
		return u + "&done=" + done
	}
	return u + "?done=" + done
}
