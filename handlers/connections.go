package handlers

import (
	"errors"
	"net/http"
	"slices"

	"pizzabot/connections"
	"pizzabot/db"
	"pizzabot/views"
)

// Each person's own sign-ins to MCP servers (docs/mcp.md): the Connections
// page, GET/DELETE /api/v1/connections, /connect/{server} to the
// authorization server and /connect/callback back. Every query is the
// signed-in user's.

// errNoConnections answers when the server keeps no connections (no key to
// seal tokens with).
var errNoConnections = httpError{http.StatusNotFound, "Connections are not enabled on this server (PIZZA_SECRET_KEY)."}

// showConnections lists the servers people sign in to, with the user's
// connection to each.
func (h *Handler) showConnections(w http.ResponseWriter, r *http.Request) error {
	return h.renderConnections(w, r, http.StatusOK, "")
}

func (h *Handler) renderConnections(w http.ResponseWriter, r *http.Request, status int, msg string) error {
	ctx := r.Context()
	user := userFrom(ctx)
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	p := views.Connections{Nav: nav, Now: h.now(), Error: msg, Unavailable: h.conns == nil}
	if h.conns != nil {
		conns, err := h.conns.List(ctx, user.ID)
		if err != nil {
			return err
		}
		names := h.conns.Names(ctx)
		for _, c := range conns {
			if !slices.Contains(names, c.Server) {
				names = append(names, c.Server) // a server removed since: Disconnect stays offered
			}
		}
		slices.Sort(names)
		for _, n := range names {
			row := views.ConnectionRow{Server: n}
			for i := range conns {
				if conns[i].Server == n {
					row.Conn = &conns[i]
				}
			}
			p.Servers = append(p.Servers, row)
		}
	}
	return h.render(w, r, status, views.ConnectionsPage(p))
}

// disconnect revokes and deletes the user's connection, from the page.
func (h *Handler) disconnect(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return errNoConnections
	}
	err := h.conns.Disconnect(r.Context(), userFrom(r.Context()).ID, r.PathValue("server"))
	if errors.Is(err, db.ErrNotFound) {
		return notFound
	}
	if err != nil {
		// Deleted here, the server's revocation failed: say so.
		h.log.WarnContext(r.Context(), "revoke a connection", "server", r.PathValue("server"), "err", err)
		return h.renderConnections(w, r, http.StatusOK, "Disconnected here; the server did not confirm the revocation, so revoke Pizza Bot's access in its settings too.")
	}
	http.Redirect(w, r, "/connections", http.StatusSeeOther)
	return nil
}

// startConnect sends the signed-in browser to server's authorization
// server; ?return= is where the callback sends it back (a local path),
// ?scope= widens what is asked for (a step-up).
func (h *Handler) startConnect(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return errNoConnections
	}
	ret := r.URL.Query().Get("return")
	if !connections.LocalPath(ret) {
		ret = "/connections"
	}
	to, err := h.conns.Begin(r.Context(), userFrom(r.Context()).ID, r.PathValue("server"), ret, r.URL.Query().Get("scope"))
	if err != nil {
		h.log.WarnContext(r.Context(), "start a connection", "server", r.PathValue("server"), "err", err)
		return h.renderConnections(w, r, http.StatusBadGateway, "Cannot connect "+r.PathValue("server")+": "+err.Error())
	}
	http.Redirect(w, r, to, http.StatusFound)
	return nil
}

// finishConnect is the authorization server's redirect back: it checks
// state, exchanges the code and returns the person where they started.
func (h *Handler) finishConnect(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return errNoConnections
	}
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		return h.renderConnections(w, r, http.StatusBadRequest, "The sign-in was not completed: "+e+" "+q.Get("error_description"))
	}
	_, ret, err := h.conns.Finish(r.Context(), userFrom(r.Context()).ID, q.Get("state"), q.Get("code"))
	if errors.Is(err, connections.ErrBadState) {
		return h.renderConnections(w, r, http.StatusBadRequest, err.Error())
	}
	if err != nil {
		h.log.WarnContext(r.Context(), "finish a connection", "err", err)
		return h.renderConnections(w, r, http.StatusBadGateway, "The sign-in failed: "+err.Error())
	}
	if !connections.LocalPath(ret) {
		ret = "/connections"
	}
	http.Redirect(w, r, ret, http.StatusSeeOther)
	return nil
}

// clientMetadata serves the Client ID Metadata Document: Pizza Bot's
// client_id at authorization servers that fetch it.
func (h *Handler) clientMetadata(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return notFound
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, err := w.Write(h.conns.ClientMetadata())
	return err
}

// apiListConnections is the user's connections, never a token.
func (h *Handler) apiListConnections(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return writeJSON(w, http.StatusOK, map[string]any{"connections": []connections.Connection{}})
	}
	list, err := h.conns.List(r.Context(), userFrom(r.Context()).ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"connections": list})
}

// apiDeleteConnection revokes and deletes the user's connection to server.
func (h *Handler) apiDeleteConnection(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return errNoConnections
	}
	err := h.conns.Disconnect(r.Context(), userFrom(r.Context()).ID, r.PathValue("server"))
	if errors.Is(err, db.ErrNotFound) {
		return err
	}
	if err != nil {
		h.log.WarnContext(r.Context(), "revoke a connection", "server", r.PathValue("server"), "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
