package handlers

import "net/http"

// routes is the table of contents of the web interface.
func (h *Handler) routes(mux *http.ServeMux) {
	// Open to anyone: probes and assets.
	mux.Handle("GET /healthz", h.handle(h.healthz))
	mux.Handle("GET /readyz", h.handle(h.readyz))
	mux.Handle("GET /static/{hash}/{path...}", h.handle(h.serveStatic))

	// The inbox: a queue, narrowed with ?folder=ID and ?trigger=KIND,
	// paginated with ?after=CURSOR.
	toInbox := http.RedirectHandler("/inbox/all", http.StatusFound)
	mux.Handle("GET /{$}", toInbox)
	mux.Handle("GET /inbox", toInbox)
	mux.Handle("GET /inbox/{$}", toInbox)
	mux.Handle("GET /inbox/{queue}", h.page(h.listQueue))

	// Threads.
	mux.Handle("GET /threads/new", h.page(h.composeForm))
	mux.Handle("POST /threads", h.page(h.createThread))
	mux.Handle("GET /threads/{id}", h.page(h.showThread))
	mux.Handle("POST /threads/bulk", h.page(h.bulkAction))
	mux.Handle("POST /threads/{id}/read", h.page(h.markRead))
	mux.Handle("POST /threads/{id}/unread", h.page(h.markUnread))
	mux.Handle("POST /threads/{id}/archive", h.page(h.archive))
	mux.Handle("POST /threads/{id}/unarchive", h.page(h.unarchive))
	mux.Handle("POST /threads/{id}/move", h.page(h.moveThread))

	// Folders. A folder's threads are listed at /inbox/{queue}?folder=ID.
	mux.Handle("GET /folders", h.page(h.listFolders))
	mux.Handle("POST /folders", h.page(h.createFolder))
	mux.Handle("POST /folders/{id}/rename", h.page(h.renameFolder))
	mux.Handle("POST /folders/{id}/delete", h.page(h.deleteFolder))

	// Anything else is a 404 page, with the sidebar when signed in.
	mux.Handle("/", h.page(func(http.ResponseWriter, *http.Request) error {
		return httpError{http.StatusNotFound, "This page does not exist."}
	}))
}
